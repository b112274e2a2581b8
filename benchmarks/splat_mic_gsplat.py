"""NeRF-synthetic mic (or another scene the sample reads: instant-ngp's fox
with --data data/fox --downscale 2) trained with this library's splatting
sample and with gsplat, on the same images, steps, initial Gaussians and test
views, both scored by one evaluator. A capture's lens distortion is
resampled out of its images first (examples/nerf/views.py View.pinhole), for
both trainers.

Steps (repository root; each its own process, so TensorFlow and PyTorch
never share one; the scene's files are made by the first that needs them):
  python3 -m benchmarks.splat_mic_gsplat prepare [--data data/mic] [--dir runs/splat_mic_gsplat]
      DIR/scene.npz: the training and test views as the sample sees them
      (examples.nerf.datasets, composited on the background; OpenCV cameras)
      and the scene's extent; DIR/init.npz: the sample's random initial
      Gaussians in the scene's box (examples/splat/train.py --write-init).
  python3 -m benchmarks.splat_mic_gsplat ours --steps N
      python -m examples.splat.train --init-from DIR/init.npz: DIR/ours/.
  python3 -m benchmarks.splat_mic_gsplat gsplat --steps N
      benchmarks/splat_gsplat_train.py (gsplat's rasterization and
      DefaultStrategy, simple_trainer's defaults; its docstring says what
      differs): DIR/gsplat/.
  python3 -m benchmarks.splat_mic_gsplat record [--out benchmarks/results/splat_mic_gsplat.h200.json]
      PSNR and SSIM of both runs' saved test renders (uint8 PNGs) against
      the scene's test views, each computed the same way (the sample's
      examples.splat.train.image_metrics), with each run's training time,
      final Gaussian count and peak GPU memory from its metrics.json.

Both trainers write their metrics.json as soon as training ends.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks import timing  # noqa: E402

RUNS = ("ours", "gsplat")
COLUMNS = [("trainer", "trainer"), ("steps", "steps"), ("training s", "train_seconds"), ("test PSNR dB", "test_psnr"),
           ("test SSIM", "test_ssim"), ("Gaussians", "gaussians"), ("peak GPU MiB", "peak_gpu_mib")]
ABOUT = ("`python3 -m benchmarks.splat_mic_gsplat`: mic (100 views at 800x800 on white) trained by examples/splat and by "
         "gsplat (benchmarks/splat_gsplat_train.py) from the same initial Gaussians for the same steps; PSNR and SSIM "
         "over the 50 test views shipped, by one evaluator; training s: the loop alone; peak GPU MiB: TensorFlow's "
         "`get_memory_info` peak against torch's `max_memory_allocated`.")
ABOUT_FOX = ("`python3 -m benchmarks.splat_mic_gsplat --data data/fox --downscale 2`: instant-ngp's fox (its lens "
             "distortion resampled out; 43 training and 7 test views at 540x960) trained by examples/splat and by gsplat "
             "from the same random initial Gaussians in the scene's box for the same steps; PSNR and SSIM over the 7 "
             "test views, by one evaluator; training s: the loop alone; peak GPU MiB as on mic.")
REPORT = {"splat_mic_gsplat.h200": ("Gaussian splatting on mic against gsplat", ABOUT, COLUMNS),
          "splat_fox_gsplat.h200": ("Gaussian splatting on fox against gsplat", ABOUT_FOX, COLUMNS)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.splat_mic_gsplat", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("prepare", "ours", "gsplat", "record"))
    p.add_argument("--data", default="data/mic", help="the scene's folder (a format the sample reads)")
    p.add_argument("--dir", default="runs/splat_mic_gsplat", help="where the scene's files and both runs go")
    p.add_argument("--downscale", type=int, default=1, help="divide the images' sides by this")
    p.add_argument("--init-points", type=int, default=None, help="initial random Gaussians (the sample's default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial Gaussians and the views' order")
    p.add_argument("--steps", type=int, default=None, help="training steps (ours, gsplat; required there)")
    p.add_argument("--out", default=None, help="record: the JSON written")
    p.add_argument("--quiet", action="store_true", help="no progress lines from the trainers")
    a = p.parse_args(argv)
    if a.action in ("ours", "gsplat") and (a.steps is None or a.steps < 1):
        p.error(f"{a.action} needs --steps N (at least 1)")
    return a


def paths(a):
    return os.path.join(a.dir, "scene.npz"), os.path.join(a.dir, "init.npz")


def sample_args(a, *extra):
    """The sample's flags for this scene (both its run and the initialisation that prepare writes)."""
    args = ["--data", a.data, "--downscale", str(a.downscale), "--seed", str(a.seed), "--background", "white"]
    if a.init_points:
        args += ["--init-points", str(a.init_points)]
    return args + list(extra)


def prepare(a):
    from examples.splat import train

    scene_path, init_path = paths(a)
    trainer = train.Trainer(train.parse_args(sample_args(a, "--steps", "1", "--write-init", init_path)))
    test = trainer.dataset.splits["test"]
    if not test:
        raise SystemExit(f"{a.data}: no test views")
    cams = lambda views: [np.stack(x) for x in zip(*[train.camera(v) for v in views])]  # noqa: E731
    train_viewmats, train_Ks = cams(trainer.train_views)
    test_viewmats, test_Ks = cams(test)
    for name, views in (("training", trainer.train_views), ("test", test)):
        if len({(v.height, v.width) for v in views}) != 1:
            raise SystemExit(f"{a.data}: the {name} views differ in size")
    train_targets = np.stack([image.numpy() for _, _, image in trainer.view_tensors])
    np.savez(scene_path, train_targets=train_targets, train_viewmats=train_viewmats, train_Ks=train_Ks,
             test_targets=np.stack([v.composite(trainer.background) for v in test]), test_viewmats=test_viewmats,
             test_Ks=test_Ks, background=trainer.background, extent=np.float64(trainer.extent),
             seed=np.int64(a.seed))
    print(f"wrote {scene_path} ({len(trainer.train_views)} training and {len(test)} test views) and {init_path} "
          f"({trainer.gaussians.count} Gaussians)")


def ensure_prepared(a):
    """Runs `prepare` in a process of its own (TensorFlow) unless its files are there."""
    if all(os.path.exists(p) for p in paths(a)):
        return
    os.makedirs(a.dir, exist_ok=True)
    cmd = [sys.executable, "-m", "benchmarks.splat_mic_gsplat", "prepare", "--data", a.data, "--dir", a.dir,
           "--downscale", str(a.downscale), "--seed", str(a.seed)]
    if a.init_points:
        cmd += ["--init-points", str(a.init_points)]
    subprocess.run(cmd, cwd=ROOT, check=True)


def run_ours(a):
    from examples.splat import train

    extra = ["--init-from", paths(a)[1], "--steps", str(a.steps), "--name", "ours", "--out-dir", a.dir]
    return train.main(sample_args(a, *extra) + (["--quiet"] if a.quiet else []))


def run_gsplat(a):
    from benchmarks import splat_gsplat_train

    scene_path, init_path = paths(a)
    return splat_gsplat_train.main(["--scene", scene_path, "--init", init_path, "--steps", str(a.steps), "--out",
                                    os.path.join(a.dir, "gsplat"), "--seed", str(a.seed)]
                                   + (["--quiet"] if a.quiet else []))


def score(run_dir, refs):
    """(PSNR list, SSIM list) of run_dir's test_NNN.png against refs [V, H, W, 3] (one evaluator for both runs)."""
    import imageio.v2 as imageio

    from examples.splat.train import image_metrics

    files = sorted(glob.glob(os.path.join(run_dir, "test_[0-9][0-9][0-9].png")))
    if len(files) != len(refs):
        raise SystemExit(f"{run_dir}: {len(files)} test renders, the scene has {len(refs)} test views")
    psnrs, ssims = [], []
    for path, ref in zip(files, refs):
        img = np.asarray(imageio.imread(path), np.float32)[..., :3] / 255.0
        psnr, ssim = image_metrics(img, ref)
        psnrs.append(psnr)
        ssims.append(ssim)
    return psnrs, ssims


def record(a):
    import tensorflow as tf

    scene_path, _ = paths(a)
    with np.load(scene_path) as f:
        refs = f["test_targets"]
    rows, found = [], {}
    for name in RUNS:
        run_dir = os.path.join(a.dir, name)
        with open(os.path.join(run_dir, "metrics.json")) as f:
            m = json.load(f)
        found[name] = m
        psnrs, ssims = score(run_dir, refs)
        rows.append({"trainer": "metal_ops (examples/splat)" if name == "ours" else f"gsplat {m.get('gsplat')}",
                     "steps": m["steps"], "train_seconds": m["train_seconds"],
                     "test_psnr": float(np.mean(psnrs)), "test_ssim": float(np.mean(ssims)),
                     "gaussians": m["gaussians"], "peak_gpu_mib": m.get("peak_gpu_mib"), "test_views": len(psnrs),
                     "test_psnr_per_view": psnrs, "test_ssim_per_view": ssims})
    if found["ours"]["steps"] != found["gsplat"]["steps"]:
        raise SystemExit(f"the runs differ in steps: {found['ours']['steps']} and {found['gsplat']['steps']}")
    ours, theirs = rows
    print(f"| trainer | steps | train s | test PSNR dB | test SSIM | Gaussians | peak GPU MiB |\n" + "| --- " * 7 + "|")
    for r in rows:
        peak = "-" if r["peak_gpu_mib"] is None else f"{r['peak_gpu_mib']:.0f}"
        print(f"| {r['trainer']} | {r['steps']} | {r['train_seconds']:.1f} | {r['test_psnr']:.2f} "
              f"| {r['test_ssim']:.4f} | {r['gaussians']} | {peak} |")
    print(f"PSNR ours - gsplat: {ours['test_psnr'] - theirs['test_psnr']:+.2f} dB; training time ours / gsplat: "
          f"{ours['train_seconds'] / theirs['train_seconds']:.2f}")
    if a.out:
        gpu = found["gsplat"].get("gpu")
        timing.write_json(a.out, {
            "device": f"GPU: {gpu}" if gpu else None, "scene": a.data, "steps": ours["steps"],
            "versions": {"tensorflow": tf.__version__, "torch": found["gsplat"].get("torch"),
                         "gsplat": found["gsplat"].get("gsplat")},
            "gsplat_strategy": found["gsplat"].get("strategy"),
            "commands": {name: found[name].get("config") for name in RUNS}, "rows": rows})
    return rows


def main(argv=None):
    a = parse_args(argv)
    if a.action == "prepare":
        os.makedirs(a.dir, exist_ok=True)
        prepare(a)
    elif a.action == "record":
        record(a)
    else:
        ensure_prepared(a)
        (run_ours if a.action == "ours" else run_gsplat)(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
