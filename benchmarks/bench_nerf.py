"""Time-to-quality: the hash-grid NeRF sample vs the Keras example's NeRF, one process, same data.

Both models train in the same pipeline (examples/nerf: same scene, same random
ray batches, same held-out validation views, evaluation time excluded from the
clock). The baseline (positional encoding, 8 Dense(64) with a skip, composite
rendering, MSE, Adam 1e-3) trains for --baseline-minutes (30 by default); its
best held-out PSNR is the target. The hash-grid model then trains until it
reaches that PSNR (or --hash-minutes). Printed and saved: both curves, the
target, the times and their ratio (goal: >= 10x sooner).

  .venv/bin/python -m benchmarks.bench_nerf            # ~30 min + hash time
  .venv/bin/python -m benchmarks.bench_nerf --baseline-minutes 3 --hash-minutes 3   # quick look

Writes benchmarks/results/nerf.<device>.json and nerf.<device>.png (device: cpu,
or the GPU's model).

`--step-time` measures instead the hash model's training step in `make demo`'s
configuration with its MLPs fused (metal_ops.layers.FusedMLP + sh_encode, the
default) and as Keras Dense layers + TF ops (`--mlp dense`): two trainers in one
process, past the occupancy grid's warm-up, interleaved rounds of a few steps
each at the same step numbers; prints ms per step, the median of the per-round
ratios and points per second, and writes benchmarks/results/nerf_step.<device>.json.

  .venv/bin/python -m benchmarks.bench_nerf --step-time

`--samplers` trains the hash model once with each sampler (`--sampler fixed`:
24 samples on every ray, `--sampler march`: metal_ops.ray_march +
packed_volume_render at the same number of field evaluations per step) for
`--minutes` each, one after the other in one process, on the procedural scene
or `--data` (e.g. a NeRF-synthetic lego folder with `--downscale 8`); prints
both held-out PSNR-vs-time curves, the field evaluations per ray and per step,
and the first time each reaches `--target` dB. Writes
benchmarks/results/nerf_samplers.<device>.json and nerf_samplers.<device>.png.

  .venv/bin/python -m benchmarks.bench_nerf --samplers --minutes 1.5 --data data/nerf_synthetic/lego --downscale 8

`--march-profile` trains the march sampler for --warmup-steps, then times each
part of its step alone in a tf.function (ray_march, the density-only pruning
pass and its hash encoding and MLP, the field forward and backward on the
kept samples) against the whole step; writes nerf_march_profile.<device>.json.

  .venv/bin/python -m benchmarks.bench_nerf --march-profile --warmup-steps 400 --rounds 15
"""
import argparse
import os
import platform
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import timing  # noqa: E402
from examples.nerf import config, environment, train as nerf_train  # noqa: E402


def result_file(args, benchmark):
    """<--out>/<benchmark>.<device>.json, the device being TensorFlow's first
    GPU (its model) or the CPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None
    return os.path.join(args.out, f"{benchmark}.{timing.device_label(name)}.json")


def run(model, minutes, eval_every, extra, stop_at=None, quiet=False):
    argv = ["--name", f"bench_{model}", "--model", model, "--max-minutes", str(minutes),
            "--steps", "1000000", "--eval-every", str(eval_every), "--ckpt-every", "0",
            "--no-outputs", "--quiet"] + extra
    args = config.build_parser().parse_args(argv)
    tr = nerf_train.Trainer(args, log=lambda *a: None)
    cpu0 = time.process_time()

    def cb(trainer, h):
        if not quiet:
            print(f"  [{model}] step {h['step']:6d}  {h['train_seconds']:8.1f} s  "
                  f"val PSNR {h['val_psnr']:.2f} dB", flush=True)
        return stop_at is not None and h["val_psnr"] >= stop_at

    # The LR schedule follows the time budget, so it decays on the baseline's 30-minute clock.
    tr.fit(verbose=False, eval_callback=cb)
    return tr, time.process_time() - cpu0


def step_time(args):
    from benchmarks.timing import load_average, median_ratio

    common = ["--steps", "1000000", "--max-minutes", "0", "--eval-every", "0", "--ckpt-every", "0",
              "--no-outputs", "--quiet", "--data-dir", os.path.join(ROOT, "data"),
              "--out-dir", os.path.join(ROOT, "runs")]
    trainers = {}
    for mlp in ("fused", "dense"):
        parsed = config.build_parser().parse_args(common + ["--name", f"step_{mlp}", "--mlp", mlp])
        trainers[mlp] = nerf_train.Trainer(parsed, log=lambda *a: None)
    a = trainers["fused"].args
    points = a.batch_rays * a.samples
    print(f"hash NeRF training step, {a.batch_rays} rays x {a.samples} samples = {points} points, "
          f"warm-up {args.warmup_steps} steps each ...", flush=True)
    for tr in trainers.values():
        for _ in range(args.warmup_steps):
            tr.train_one_step()
    per_round = {name: [] for name in trainers}
    for _ in range(args.rounds):
        for name, tr in trainers.items():
            t0 = time.perf_counter()
            for _ in range(args.steps_per_round):
                tr.train_one_step()
            per_round[name].append(((time.perf_counter() - t0) * 1e3 / args.steps_per_round, 0.0))
    med = {name: sorted(w for w, _ in v)[len(v) // 2] for name, v in per_round.items()}
    ratio = median_ratio(per_round["dense"], per_round["fused"])
    for name in trainers:
        print(f"  --mlp {name:5s}: {med[name]:7.1f} ms/step  {points / med[name] * 1e3 / 1e6:6.2f} M points/s")
    print(f"fused vs dense: {ratio:.2f}x faster per step (median of {args.rounds} per-round ratios; "
          f"load average {load_average():.1f})")
    res = dict(benchmark="nerf_step", points_per_step=points, rounds=args.rounds,
               steps_per_round=args.steps_per_round, warmup_steps=args.warmup_steps,
               ms_per_step=med, per_round_ms={k: [w for w, _ in v] for k, v in per_round.items()},
               speedup_fused_vs_dense=ratio, target_speedup=2.0,
               machine=dict(platform=platform.platform(), cpus=os.cpu_count(), loadavg=list(os.getloadavg())),
               config={k: v for k, v in vars(a).items() if k not in ("name", "mlp")})
    timing.write_json(result_file(args, "nerf_step"), res)
    return res


def samplers(args):
    from benchmarks.timing import cpu_description, load_average

    common = ["--eval-views", str(args.eval_views), "--data-dir", os.path.join(ROOT, "data"),
              "--out-dir", os.path.join(ROOT, "runs")]
    if args.data:
        common += ["--data", args.data, "--downscale", str(args.downscale)]
    runs = {}
    for sampler in ("fixed", "march"):
        print(f"--sampler {sampler} for {args.minutes} min of training ...", flush=True)
        tr, cpu = run("hash", args.minutes, args.hash_eval_every, common + ["--sampler", sampler],
                      quiet=False)
        hist = tr.history
        reached = [h for h in hist if h["val_psnr"] >= args.target]
        runs[sampler] = dict(steps=tr.step, history=hist, process_cpu_seconds=cpu, **tr.sample_stats(),
                             best_val_psnr=max(h["val_psnr"] for h in hist),
                             seconds_to_target=reached[0]["train_seconds"] if reached else None)
        st = runs[sampler]
        print(f"  --sampler {sampler}: {tr.step} steps, best {st['best_val_psnr']:.2f} dB, "
              f"{st['field_evals_per_ray']:.1f} field evaluations per ray, {st['field_evals_per_step']:.0f} per step, "
              f"{args.target} dB at {st['seconds_to_target'] if reached else 'never'} s "
              f"(load average {load_average():.1f})", flush=True)
        last = tr
    res = dict(benchmark="nerf_samplers", cpu=cpu_description(), minutes=args.minutes, target_psnr=args.target,
               data=args.data or "procedural", downscale=args.downscale if args.data else None,
               machine=dict(platform=platform.platform(), cpus=os.cpu_count(), loadavg_at_end=list(os.getloadavg())),
               runs=runs)
    path = result_file(args, "nerf_samplers")
    os.makedirs(args.out, exist_ok=True)
    png = path[:-len(".json")] + ".png"
    last.plot_curve(png, others=[("hash, --sampler fixed", runs["fixed"]["history"])])
    res["plot"] = os.path.basename(png)
    timing.write_json(path, res)
    print(f"results: {path}, plot: {png} (the 'hash' curve is --sampler march)")
    return res


def march_profile(args):
    """Where a march-sampler training step's time goes: each part alone in a tf.function, one trained state."""
    import statistics

    import tensorflow as tf

    import metal_ops
    from benchmarks.timing import cpu_description, load_average
    from examples.nerf import model as nerf_model

    argv = ["--name", "march_profile", "--steps", "1000000", "--max-minutes", "0", "--eval-every", "0",
            "--ckpt-every", "0", "--no-outputs", "--quiet", "--data-dir", os.path.join(ROOT, "data"),
            "--out-dir", os.path.join(ROOT, "runs")] + (["--march-steps", str(args.march_steps)]
                                                       if args.march_steps else [])
    tr = nerf_train.Trainer(config.build_parser().parse_args(argv), log=lambda *a: None)
    print(f"training {args.warmup_steps} steps first ...", flush=True)
    for _ in range(args.warmup_steps):
        tr.train_one_step()
    a, grid, model, aabb = tr.args, tr.grid, tr.model, tr.dataset.aabb
    rays = tr.rays_for_budget()
    idx = tf.constant(tr.batch_indices(10 ** 6, rays))
    o, d = tf.gather(tr.train_o, idx), tf.gather(tr.train_d, idx)
    r = tf.shape(o)[0]

    @tf.function
    def march():
        return metal_ops.ray_march(o, d, tf.fill([r], float(tr.near)), tf.fill([r], float(tr.far)),
                                   metal_ops.pack_occupancy(grid.mask[None]), aabb, grid.resolution, tr.step_size,
                                   max_samples=a.max_samples, jitter=True, seed=3)

    def points(s):
        t_mid = 0.5 * (s.t_starts + s.t_ends)
        return nerf_model.normalize_points(
            tf.gather(o, s.ray_indices) + tf.gather(d, s.ray_indices) * t_mid[:, None], aabb)

    encode = tf.function(lambda p: model.encoding(p))
    density_mlp = tf.function(lambda e: model.density_mlp(e))
    density = tf.function(lambda p: model.density(p)[0])
    prune = tf.function(lambda s, sigma: nerf_model._before_termination(s, sigma, 1e-4, r))
    marched = march()
    p_all = points(marched)
    sigma_all = density(p_all)
    kept = prune(marched, sigma_all)
    p_kept, d_kept = points(kept), tf.gather(d, kept.ray_indices)

    @tf.function
    def field_forward(p, dirs):
        return model(p, dirs)

    @tf.function
    def field_forward_backward(p, dirs):
        with tf.GradientTape() as tape:
            sigma, rgb = model(p, dirs)
            out = metal_ops.packed_volume_render(sigma, rgb, kept.t_starts, kept.t_ends, kept.ray_offsets,
                                                 kept.ray_counts, background=tf.ones([3]), early_termination=1e-4)
            loss = tf.reduce_mean(tf.square(out.rgb - 0.5))
        return tape.gradient(loss, model.trainable_variables)

    step_fn = tr._get_train_fn(True)
    e_all = encode(p_all)
    parts = {
        "train step (all of it)": lambda: step_fn(tf.constant(10 ** 6, tf.int64), tf.constant(rays)),
        "ray_march": march,
        "pruning pass: density on every marched sample": lambda: density(p_all),
        "  of which the hash encoding": lambda: encode(p_all),
        "  of which the density MLP": lambda: density_mlp(e_all),
        "pruning bookkeeping (transmittance, gathers)": lambda: prune(marched, sigma_all),
        "field forward on the kept samples": lambda: field_forward(p_kept, d_kept),
        "field + renderer forward and backward on the kept samples": lambda: field_forward_backward(p_kept, d_kept),
    }
    n_marched, n_kept = int(tf.shape(marched.t_starts)[0]), int(tf.shape(kept.t_starts)[0])
    print(f"{cpu_description()}; load average {load_average():.1f}; {rays} rays, {n_marched} marched samples, "
          f"{n_kept} kept; step size {tr.step_size:.5f} ({a.march_steps} steps per diagonal)")
    res = {}
    for name, fn in parts.items():
        fn(), fn()
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        res[name] = statistics.median(times)
        print(f"  {name:60s} {res[name]:7.1f} ms", flush=True)
    res = dict(benchmark="nerf_march_profile", cpu=cpu_description(), load_average=load_average(), rays=rays,
               marched=n_marched, kept=n_kept, march_steps=a.march_steps, warmup_steps=args.warmup_steps,
               median_ms=res)
    timing.write_json(result_file(args, "nerf_march_profile"), res)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-time", action="store_true",
                   help="time one training step with fused vs Dense MLPs instead (see above)")
    p.add_argument("--rounds", type=int, default=15, help="--step-time: interleaved rounds")
    p.add_argument("--steps-per-round", type=int, default=4, help="--step-time: steps of each model per round")
    p.add_argument("--warmup-steps", type=int, default=140,
                   help="--step-time: steps before timing (past the occupancy grid's warm-up)")
    p.add_argument("--baseline-minutes", type=float, default=30.0)
    p.add_argument("--hash-minutes", type=float, default=10.0, help="cap on the hash model's training time")
    p.add_argument("--baseline-eval-every", type=int, default=100)
    p.add_argument("--hash-eval-every", type=int, default=25)
    p.add_argument("--eval-views", type=int, default=4)
    p.add_argument("--samplers", action="store_true",
                   help="PSNR-vs-time of --sampler fixed and --sampler march instead (see above)")
    p.add_argument("--minutes", type=float, default=1.5, help="--samplers: training minutes of each run")
    p.add_argument("--target", type=float, default=31.0, help="--samplers: the PSNR whose first time is reported")
    p.add_argument("--data", default=None, help="--samplers: a scene on disk (the trainer's --data)")
    p.add_argument("--downscale", type=int, default=8, help="--samplers: with --data")
    p.add_argument("--out", default=timing.RESULTS, help="the folder of the result files")
    p.add_argument("--march-profile", action="store_true",
                   help="time the parts of a march-sampler step after --warmup-steps of training instead (see above)")
    p.add_argument("--march-steps", type=int, default=None, help="--march-profile: the trainer's --march-steps")
    args = p.parse_args(argv)
    # The process settings the sample's command line makes (train.train): TensorFlow's GPU threads
    # and, for its --jit runs, XLA's flags, before TensorFlow starts.
    environment.set_process_environment()
    environment.set_xla_flags()
    if args.march_profile:
        return march_profile(args)
    if args.step_time:
        return step_time(args)
    if args.samplers:
        return samplers(args)
    common = ["--eval-views", str(args.eval_views), "--data-dir", os.path.join(ROOT, "data"),
              "--out-dir", os.path.join(ROOT, "runs")]

    print(f"baseline (Keras example NeRF) for {args.baseline_minutes} min of training ...", flush=True)
    base, base_cpu = run("baseline", args.baseline_minutes, args.baseline_eval_every, common)
    bh = base.history
    best = max(h["val_psnr"] for h in bh)
    t_best_base = min(h["train_seconds"] for h in bh if h["val_psnr"] >= best)
    print(f"baseline best held-out PSNR {best:.2f} dB (first reached at {t_best_base:.0f} s, "
          f"{base.step} steps)", flush=True)

    print(f"hash-grid NeRF until it reaches {best:.2f} dB (cap {args.hash_minutes} min) ...", flush=True)
    hsh, hash_cpu = run("hash", args.hash_minutes, args.hash_eval_every, common, stop_at=best)
    hh = hsh.history
    reached = [h for h in hh if h["val_psnr"] >= best]
    t_hash = reached[0]["train_seconds"] if reached else None

    budget = args.baseline_minutes * 60.0
    res = dict(
        benchmark="nerf_time_to_quality",
        machine=dict(platform=platform.platform(), cpus=os.cpu_count(),
                     loadavg_at_end=list(os.getloadavg())),
        baseline=dict(minutes=args.baseline_minutes, steps=base.step, best_val_psnr=best,
                      seconds_to_best=t_best_base, process_cpu_seconds=base_cpu, history=bh,
                      config=vars(base.args)),
        hash=dict(steps=hsh.step, reached=bool(reached), seconds_to_target=t_hash,
                  process_cpu_seconds=hash_cpu, history=hh, config=vars(hsh.args)),
        speedup_vs_budget=(budget / t_hash) if t_hash else None,
        speedup_vs_baseline_time_to_best=(t_best_base / t_hash) if t_hash else None,
        target_speedup=10.0,
    )
    path = result_file(args, "nerf")
    os.makedirs(args.out, exist_ok=True)
    png = path[:-len(".json")] + ".png"
    base.plot_curve(png, others=[("hash (metal_ops)", hh)])
    res["plot"] = os.path.basename(png)
    timing.write_json(path, res)
    if t_hash:
        print(f"hash-grid model reached {best:.2f} dB after {t_hash:.1f} s of training: "
              f"{budget / t_hash:.1f}x sooner than the baseline's {budget / 60:.0f}-minute budget, "
              f"{t_best_base / t_hash:.1f}x sooner than the baseline reached it ({t_best_base:.0f} s)")
    else:
        print(f"hash-grid model did not reach {best:.2f} dB within {args.hash_minutes} min "
              f"(best {max(h['val_psnr'] for h in hh):.2f} dB)")
    print(f"results: {path}, plot: {png}")
    return res


if __name__ == "__main__":
    main()
