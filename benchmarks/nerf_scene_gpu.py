"""The NeRF sample on a real scene on a GPU, with instant-NGP's recipe: time to
PSNR, the standard test views, an ablation of the recipe and a step profile.

One process per call; the scene is loaded once. The scene stays outside the
repository (--data: a NeRF-synthetic folder such as mic, or an instant-ngp
folder such as fox). The trainer runs `--recipe ngp` (docs/NERF.md,
"Recipes") plus any trainer flags given
after `--`.

  # mic: 5 minutes of training, curve on 10 held-out views, all 200 test views, the profile (about 7 min)
  python -m benchmarks.nerf_scene_gpu --data data/mic --minutes 5 --profile
  # the ablation: the recipe untimed for --ablation-warmup, then each configuration trains
  # --ablation-seconds, all within --budget-minutes
  python -m benchmarks.nerf_scene_gpu --data data/mic --minutes 0 --ablation --ablation-seconds 30 --budget-minutes 6.5
  # fox (instant-ngp's folder as it is: 50 of 67 images, every 8th held out)
  python -m benchmarks.nerf_scene_gpu --data data/fox --minutes 2

(data/mic, data/fox: compact copies written by `python -m examples.nerf.pack`, see docs/NERF.md.)

Writes benchmarks/results/nerf_<scene>.<device>.json (+ .png: held-out PSNR
against training time), nerf_<scene>_ablation.<device>.json and
nerf_<scene>_profile.<device>.json, where <device> names the GPU (h100,
h200, ...). Pictures, the orbit and the trainer's metrics.json go to
runs/nerf_<scene>/. `--quick` runs tiny settings on whatever TensorFlow has
(the CPU included), for tests of this script.
"""
import argparse
import gc
import glob
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from benchmarks import timing  # noqa: E402
from examples.nerf import datasets  # noqa: E402
from examples.nerf import config, environment, train as nerf_train  # noqa: E402

# Published figures on the same scenes' standard test views (beside ours in docs/PERFORMANCE.md), keyed by the
# scene folder's name.
ANCHORS = {
    "mic": [dict(method="instant-NGP (paper)", psnr=36.22, seconds=300, gpu="RTX 3090")],
}
CURVE_SECONDS = (5, 10, 15, 20, 30, 45, 60, 90, 120, 150, 180, 240, 300, 360, 420, 480, 600)
PSNR_MARKS = (28.0, 30.0, 32.0, 33.0, 34.0, 35.0, 36.0, 36.2)

# One change each from the recipe: what each of its points is worth.
ABLATION = [
    ("ngp recipe", []),
    ("white training background", ["--background", "white"]),
    ("Huber loss (delta 0.1), instant-NGP's", ["--loss", "huber"]),
    ("lr 2e-2 (the small recipe's)", ["--lr", "2e-2"]),
    ("no lr warm-up", ["--lr-warmup", "0"]),
    ("every-cell grid update, cell threshold", ["--grid-rule", "every-cell"]),
    ("grid 64^3", ["--grid-res", "64"]),
    ("512 march steps per diagonal", ["--march-steps", "512"]),
    ("98,304 samples a step", ["--sample-budget", "98304"]),
    ("small encoding (12 levels, 2^16, finest 512)", ["--levels", "12", "--log2-table", "16", "--finest-res", "512"]),
    ("float32 MLPs", ["--mlp-precision", "float32"]),
]


def device_tag(tf):
    """'h100', 'h200', ... from the first GPU's name; 'cpu' without one."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", timing.cpu_description()
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu")
    return timing.device_label(name), name


def trainer_args(args, name, extra, minutes):
    argv = ["--data", args.data, "--recipe", "ngp", "--name", name, "--out-dir", args.out_dir,
            "--max-minutes", str(minutes), "--quiet", "--ckpt-every", "0"]
    if args.downscale != 1:
        argv += ["--downscale", str(args.downscale)]
    if args.quick:  # tiny: a CPU finishes in seconds
        argv += ["--levels", "8", "--log2-table", "14", "--finest-res", "128", "--batch-rays", "512",
                 "--sample-budget", "8192", "--march-steps", "128", "--grid-res", "32", "--grid-warmup", "8",
                 "--grid-every", "4", "--eval-chunk", "4096", "--orbit-frames", "2", "--steps", str(args.quick_steps)]
    return config.parse_args(argv + list(args.trainer_flags) + list(extra))


def first_times(history):
    """{mark: first training seconds at which the curve reached it}."""
    out = {}
    for mark in PSNR_MARKS:
        hit = [h["train_seconds"] for h in history if h["val_psnr"] >= mark]
        out[f"{mark:g}"] = hit[0] if hit else None
    return out


def run_steps(tr, n):
    """n training steps, then waits for the device (reads the last loss back)."""
    loss = None
    for _ in range(n):
        loss, _ = tr.train_one_step()
    if loss is not None:
        float(loss)


def main_run(args, ds, device, gpu_name, scene):
    # Evaluations at CURVE_SECONDS and at the end (--eval-every: never by step count).
    tr = nerf_train.Trainer(trainer_args(args, f"nerf_{scene}", ["--eval-every", "100000000", "--eval-views",
                                                                  str(args.curve_views), "--pictures", "8"],
                                         args.minutes), dataset=ds)
    tr.eval_at_seconds = [t for t in CURVE_SECONDS if t < args.minutes * 60.0]
    t0 = time.perf_counter()
    train_seconds = tr.fit(verbose=False)
    fit_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    test_psnr, test_psnrs, renders = tr.evaluate("test")
    eval_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    ssims = tr.ssim(renders, "test")
    ssim_seconds = time.perf_counter() - t0
    h, w = tr.H, tr.W
    result = dict(
        benchmark=f"nerf_{scene}{'_' + args.tag if args.tag else ''}", device=gpu_name, scene=scene, data=args.data,
        recipe="ngp",
        minutes=args.minutes, steps=tr.step, train_seconds=round(train_seconds, 2),
        ms_per_step=round(1e3 * train_seconds / max(tr.step, 1), 3),
        fit_wall_seconds=round(fit_wall, 2), periodic_eval_seconds=round(fit_wall - train_seconds, 2),
        test_views=len(test_psnrs), image_size=[h, w], test_psnr=round(test_psnr, 3),
        test_ssim=round(float(np.mean(ssims)), 4) if ssims else None,
        eval_seconds=round(eval_seconds, 2), eval_ms_per_view=round(1e3 * eval_seconds / max(len(renders), 1), 1),
        ssim_seconds=round(ssim_seconds, 2),
        curve_views=len(tr.dataset.splits["val"][:args.curve_views]),
        curve_split="test" if {id(v) for v in tr.dataset.splits["val"]} <= {id(v) for v in ds.splits["test"]}
        else "val", curve=tr.history, first_seconds_to_psnr=first_times(tr.history),
        per_view_psnr=[round(x, 3) for x in test_psnrs], per_view_ssim=[round(x, 4) for x in ssims],
        anchors=ANCHORS.get(scene, []), **tr.sample_stats(),
        config={k: v for k, v in vars(tr.args).items() if k != "trainer_flags"},
        dataset_notes=tr.dataset.notes, load_seconds=round(args.load_seconds, 2))
    print(f"{scene}: {tr.step} steps in {train_seconds:.1f} s ({result['ms_per_step']:.2f} ms a step); test PSNR "
          f"{test_psnr:.2f} dB, SSIM {result['test_ssim']}, over {len(test_psnrs)} views "
          f"({eval_seconds:.1f} s to render them at {w}x{h}); curve {first_times(tr.history)}", flush=True)
    base = os.path.join(args.results, f"nerf_{scene}{'_' + args.tag if args.tag else ''}.{device}")
    result["plot"] = os.path.relpath(base + ".png", ROOT)
    plot(tr.history, result, base + ".png", scene, gpu_name)
    timing.write_json(base + ".json", result)
    tr.write_outputs(test_psnrs, renders, dict(test_ssim_mean=result["test_ssim"],
                                               test_ssim=result["per_view_ssim"]))
    print(f"pictures: {tr.run_dir}", flush=True)
    return result


def plot(history, result, path, scene, gpu_name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([h["train_seconds"] for h in history], [h["val_psnr"] for h in history], "o-", ms=3,
            label=f"this sample, {result['curve_views']} {result['curve_split']} views")
    ax.plot([result["train_seconds"]], [result["test_psnr"]], "s", label=f"all {result['test_views']} test views")
    for a in result["anchors"]:
        ax.axhline(a["psnr"], ls="--", lw=0.8, color="grey")
        ax.annotate(f"{a['method']}, {a['seconds']} s on an {a['gpu']}", (0, a["psnr"]), fontsize=7,
                    va="bottom", color="grey")
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("test PSNR (dB)")
    ax.set_title(f"{scene} on {gpu_name}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ablation(args, ds, device, gpu_name, scene):
    path = os.path.join(args.results, f"nerf_{scene}_ablation.{device}.json")
    rows, left_out, t_start, slowest = [], [], time.perf_counter(), 0.0

    def trainer(flags, seconds):
        return nerf_train.Trainer(trainer_args(args, f"ablation_{scene}", ["--eval-every", "0", "--no-outputs",
                                                                           "--test-views", str(args.ablation_views)]
                                               + flags, seconds / 60.0), dataset=ds)

    # The process's first training pays costs no later row does (the GPU's kernels loaded, the
    # first traces): the recipe trains untimed first, so the rows compare with each other.
    warmup = min(args.ablation_warmup, args.ablation_seconds)
    if warmup > 0:
        trainer(ABLATION[0][1], warmup).fit(verbose=False)
        gc.collect()
    for label, flags in ABLATION[:2] if args.quick else ABLATION:
        left = args.budget_minutes * 60.0 - (time.perf_counter() - t_start)
        if rows and left < slowest:
            print(f"ablation: {label!r} left out ({left:.0f} s of the budget left, a row takes {slowest:.0f} s)")
            left_out.append(label)
            continue
        t0 = time.perf_counter()
        tr = trainer(flags, args.ablation_seconds)
        train_seconds = tr.fit(verbose=False)
        psnr, psnrs, _ = tr.evaluate("test")
        rows.append(dict(label=label, flags=flags, steps=tr.step, train_seconds=round(train_seconds, 2),
                         ms_per_step=round(1e3 * train_seconds / max(tr.step, 1), 3), test_psnr=round(psnr, 3),
                         test_views=len(psnrs), **tr.sample_stats()))
        slowest = max(slowest, time.perf_counter() - t0)
        print(f"ablation: {label:48s} {tr.step:6d} steps, {rows[-1]['ms_per_step']:6.2f} ms a step, "
              f"{psnr:6.2f} dB ({len(psnrs)} test views)", flush=True)
        timing.write_json(path, dict(benchmark=f"nerf_{scene}_ablation", device=gpu_name, scene=scene,
                                     seconds_each=args.ablation_seconds, warmup_seconds=warmup, rows=rows))
        del tr
        gc.collect()
    if left_out:
        timing.write_json(path, dict(benchmark=f"nerf_{scene}_ablation", device=gpu_name, scene=scene,
                                     seconds_each=args.ablation_seconds, warmup_seconds=warmup, rows=rows,
                                     left_out=left_out))
    return rows


def profile(args, ds, device, gpu_name, scene):
    """Step time at two sample budgets: wall time, GPU busy time (kernels and copies) from
    TensorFlow's profiler, the rest of the step (dispatch, host work, waits), the grid update."""
    import tensorflow as tf

    from benchmarks.profile_nerf_gpu import summarise_xspace

    rows = []
    budgets = (8192, 16384) if args.quick else (98304, 262144)
    warmup, steps = (4, 3) if args.quick else (args.profile_warmup, args.profile_steps)
    for budget in budgets:
        tr = nerf_train.Trainer(trainer_args(args, f"profile_{scene}", ["--eval-every", "0", "--no-outputs",
                                                                        "--sample-budget", str(budget)], 0),
                                dataset=ds)
        run_steps(tr, warmup)
        t0 = time.perf_counter()
        run_steps(tr, steps)
        wall_ms = (time.perf_counter() - t0) * 1e3 / steps
        t0 = time.perf_counter()  # three updates, timed whole (the steps before them have ended)
        float([tr.update_grid(tr.step + 16 * i) for i in range(3)][-1])
        grid_ms = (time.perf_counter() - t0) * 1e3 / 3
        logdir = os.path.join(args.out_dir, f"profile_{scene}_{budget}")
        tf.profiler.experimental.start(logdir)
        t0 = time.perf_counter()
        run_steps(tr, steps)
        profiled_ms = (time.perf_counter() - t0) * 1e3 / steps
        tf.profiler.experimental.stop()
        paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")), key=os.path.getmtime)
        summary = summarise_xspace(paths[-1], steps) if paths else {"gpu": None, "note": "no xplane.pb written"}
        row = dict(sample_budget=budget, rays_per_step=tr.rays_for_budget(), samples_per_ray=tr.samples_per_ray,
                   wall_ms_per_step=round(wall_ms, 3), profiled_wall_ms_per_step=round(profiled_ms, 3),
                   grid_update_ms=round(grid_ms, 2), grid_every=tr.args.grid_every, **summary)
        if summary.get("gpu"):
            row["outside_kernels_ms_per_step"] = round(profiled_ms - summary["busy_ms_per_step"], 3)
            row["gpu_idle_share"] = round(1 - summary["busy_ms_per_step"] / profiled_ms, 3)
        rows.append(row)
        print(f"profile: {budget} samples a step: {wall_ms:.2f} ms wall"
              + (f", GPU busy {summary['busy_ms_per_step']:.2f} ms, {summary['kernels_per_step']:.0f} kernels"
                 if summary.get("gpu") else f" ({summary.get('note')})")
              + f"; grid update {grid_ms:.1f} ms every {tr.args.grid_every} steps", flush=True)
        del tr
        gc.collect()
    timing.write_json(os.path.join(args.results, f"nerf_{scene}_profile.{device}.json"),
                      dict(benchmark=f"nerf_{scene}_profile", device=gpu_name, scene=scene, warmup_steps=warmup,
                           steps=steps, rows=rows))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the scene: a NeRF-synthetic folder or an instant-ngp folder")
    p.add_argument("--scene", default=None, help="the name in the results' file names (default: the folder's)")
    p.add_argument("--tag", default="", help="added to the main run's file names: nerf_<scene>_<tag>.<device>.json "
                                             "(e.g. 2min beside a 5-minute run)")
    p.add_argument("--minutes", type=float, default=5.0, help="training time of the main run (0: no main run)")
    p.add_argument("--curve-views", type=int, default=10, help="test views of the PSNR-against-time curve")
    p.add_argument("--downscale", type=int, default=1)
    p.add_argument("--ablation", action="store_true", help="also the ablation (after the main run, if any)")
    p.add_argument("--ablation-seconds", type=float, default=40.0, help="training time of each configuration")
    p.add_argument("--ablation-views", type=int, default=25, help="evenly spaced test views evaluated per row")
    p.add_argument("--ablation-warmup", type=float, default=10.0,
                   help="seconds the recipe trains untimed before the rows (at most --ablation-seconds; 0: none)")
    p.add_argument("--budget-minutes", type=float, default=7.0,
                   help="the ablation leaves out the rows that would end after this much time")
    p.add_argument("--profile", action="store_true", help="also the step profile at 98,304 and 262,144 samples")
    p.add_argument("--profile-warmup", type=int, default=300)
    p.add_argument("--profile-steps", type=int, default=30)
    p.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--out-dir", default=os.path.join(ROOT, "runs"))
    p.add_argument("--quick", action="store_true", help="tiny settings on any device (tests of this script)")
    p.add_argument("--quick-steps", type=int, default=12)
    p.add_argument("trainer_flags", nargs="*", help="after --: trainer flags added to every run")
    args = p.parse_args(argv)
    # The process settings the sample's command line makes (train.train): TensorFlow's GPU threads
    # and, for its --jit runs, XLA's flags, before TensorFlow starts.
    environment.set_process_environment()
    environment.set_xla_flags()

    import tensorflow as tf

    device, gpu_name = device_tag(tf)
    if device == "cpu" and not args.quick:
        raise SystemExit("nerf_scene_gpu: TensorFlow lists no GPU (--quick runs tiny settings on the CPU)")
    scene = args.scene or os.path.basename(os.path.normpath(args.data))
    print(f"device: {gpu_name}; TensorFlow {tf.__version__}; scene {scene} ({args.data})", flush=True)
    t0 = time.perf_counter()
    ds = datasets.load(args.data, downscale=args.downscale, log=None)
    args.load_seconds = time.perf_counter() - t0
    print(f"loaded in {args.load_seconds:.1f} s: " + "; ".join(ds.notes), flush=True)
    os.makedirs(args.results, exist_ok=True)
    out = {}
    if args.minutes > 0:
        out["main"] = main_run(args, ds, device, gpu_name, scene)
    if args.profile:
        out["profile"] = profile(args, ds, device, gpu_name, scene)
    if args.ablation:
        out["ablation"] = ablation(args, ds, device, gpu_name, scene)
    return out


if __name__ == "__main__":
    main()
