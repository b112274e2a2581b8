"""Gaussian rasterization, forward + backward, against gsplat on one GPU.

metal_ops.rasterize_gaussians (project, bin, rasterize) and gsplat's
`rasterization` render the same Gaussians (random, in front of a pinhole
camera, each a few tiles wide; RGB colours; white background) and take the
gradient of sum(image * upstream), a fixed random upstream, with respect to
means, quats, scales, opacities and colours. Settings as ours: near plane
0.01, eps2d 0.3, 16-pixel tiles, gsplat's classic mode; gsplat's `packed`
is the faster of True and False for forward + backward on each size (timed
before the rounds; the file records which and both times).

The two frameworks run in two persistent worker processes (this script with
`--worker tf` and `--worker gsplat`), each loading the inputs from the .npz
the parent writes. Per size: both render once and the parent reports their
agreement (max abs difference, PSNR between the images, visible Gaussians
each); then `--rounds` rounds, each timing `--iters` forward + backward
calls on each side (GPU synchronised: TF reads a scalar of the gradients
back, torch calls torch.cuda.synchronize()), the side that goes first
alternating; ms are medians over rounds, the speedup the median of the
per-round ratios gsplat ms / ours (> 1: ours faster); peak GPU memory each.

Usage (repository root; gsplat built in runs/gsplat, TensorFlow's CUDA build):
  PYTHONPATH=$PWD/python:$PWD:$PWD/runs/gsplat python3 -m benchmarks.bench_splat_gsplat \\
      [--sizes 100000,300000,1000000] [--rounds 9] [--iters 10] \\
      [--out benchmarks/results/splat_rasterize_gsplat.h200.json]
(TORCH_LD_LIBRARY_PATH and TORCH_PYTHONPATH, where set, are the gsplat worker's paths:
TensorFlow's CUDA 12 libraries on the parent's paths are not torch's.)
Protocol check on a machine without a GPU or torch (both workers are the TF worker):
  python -m benchmarks.bench_splat_gsplat --device cpu --sizes 2000 --width 128 --height 128 --protocol-check
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks import timing  # noqa: E402
from examples.splat.train import psnr_db  # noqa: E402

BENCHMARK = "splat_rasterize_gsplat"
TAG = "@@ "  # the prefix of a worker's protocol lines on its stdout (anything else it prints is passed on)
NEAR_PLANE, EPS2D, TILE_SIZE = 0.01, 0.3, 16
GRADIENT_INPUTS = ("means", "quats", "scales", "opacities", "colors")
REPORT = {
    "splat_rasterize_gsplat.h200": (
        "Gaussian rasterization on a GPU against gsplat",
        "`python3 -m benchmarks.bench_splat_gsplat`: rasterize_gaussians against gsplat's `rasterization` (classic, "
        "its faster `packed`) at 800x800, forward + backward to every input, RGB on white, alternating rounds of two "
        "worker processes; speedup: the median of the rounds' gsplat ms / ours (> 1: ours faster); peak MiB: "
        "TensorFlow's `get_memory_info` peak (its allocator's chunks, which can be up to twice a request) against "
        "torch's `max_memory_allocated`.",
        [("Gaussians", "gaussians"), ("ours ms", "tf_ms"), ("gsplat ms", "gsplat_ms"),
         ("speedup", "speedup"), ("gsplat packed", "gsplat_packed"), ("visible ours", "tf_visible"),
         ("visible gsplat", "gsplat_visible"), ("images' PSNR dB", "image_psnr_db"),
         ("peak MiB ours", "tf_peak_mib"), ("peak MiB gsplat", "gsplat_peak_mib")]),
}


def make_inputs(n, width, height, seed=0):
    """Random Gaussians in front of a camera at the origin looking down +z
    (OpenCV), a 50-degree horizontal field of view, depths 2 to 6, centres
    within the view; pixel-space standard deviations log-uniform in [1, 6] px
    at 800 px wide (scaled with the width), each axis varied by exp(N(0, 0.3)),
    so a Gaussian's 3-sigma box spans one to a few 16-pixel tiles; opacities
    uniform in [0.1, 0.9]; RGB colours; a white background; the upstream
    gradient N(0, 1) per pixel and channel."""
    rng = np.random.default_rng(seed)
    fx = 0.5 * width / math.tan(math.radians(25.0))
    K = np.array([[fx, 0.0, width / 2.0], [0.0, fx, height / 2.0], [0.0, 0.0, 1.0]], np.float32)
    z = rng.uniform(2.0, 6.0, n)
    x = (rng.uniform(0.0, width, n) - width / 2.0) * z / fx
    y = (rng.uniform(0.0, height, n) - height / 2.0) * z / fx
    sigma_px = np.exp(rng.uniform(math.log(1.0), math.log(6.0), n)) * width / 800.0
    scales = (sigma_px * z / fx)[:, None] * np.exp(rng.normal(0.0, 0.3, (n, 3)))
    return dict(means=np.stack([x, y, z], 1).astype(np.float32),
                quats=rng.normal(size=(n, 4)).astype(np.float32),
                scales=scales.astype(np.float32),
                opacities=rng.uniform(0.1, 0.9, n).astype(np.float32),
                colors=rng.uniform(0.0, 1.0, (n, 3)).astype(np.float32),
                viewmat=np.eye(4, dtype=np.float32), K=K,
                background=np.ones(3, np.float32),
                upstream=rng.normal(size=(height, width, 3)).astype(np.float32),
                width=np.int64(width), height=np.int64(height))


def image_agreement(a, b):
    """(max abs difference, PSNR dB) of two images in [0, 1]."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))), psnr_db(a, b)


# ---------------------------------------------------------------- workers

class TFSide:
    """metal_ops.rasterize_gaussians forward + backward in a tf.function (the binning's
    output size depends on the data, so no XLA)."""

    def __init__(self, device):
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)  # the GPU is shared with the torch worker
        import metal_ops

        self.tf, self.metal_ops = tf, metal_ops
        self.device = "/GPU:0" if device == "gpu" else "/CPU:0"
        if device == "gpu" and not tf.config.list_physical_devices("GPU"):
            raise SystemExit("bench_splat_gsplat: TensorFlow sees no GPU (--device cpu runs on the CPU)")
        metal_ops.load_library()
        self.versions = {"tensorflow": tf.__version__, "metal_ops": metal_ops.__version__,
                         "metal_ops_backends": metal_ops.build_info()["backends"]}

    def load(self, d):
        tf, metal_ops = self.tf, self.metal_ops
        width, height = int(d["width"]), int(d["height"])
        with tf.device(self.device):
            self.inputs = [tf.constant(d[k]) for k in GRADIENT_INPUTS]
            viewmat, K = tf.constant(d["viewmat"]), tf.constant(d["K"])
            background, upstream = tf.constant(d["background"]), tf.constant(d["upstream"])

        def render(means, quats, scales, opacities, colors):
            return metal_ops.rasterize_gaussians(means, quats, scales, opacities, colors, viewmat, K, width, height,
                                                 background=background, near_plane=NEAR_PLANE, eps2d=EPS2D,
                                                 tile_size=TILE_SIZE)

        @tf.function
        def forward(*inputs):
            image, _, info = render(*inputs)
            return image, tf.reduce_sum(tf.cast(tf.reduce_all(info["radii"] > 0, axis=-1), tf.int32))

        @tf.function
        def forward_backward(*inputs):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                image, _, _ = render(*inputs)
                loss = tf.reduce_sum(image * upstream)
            grads = tape.gradient(loss, inputs)
            return tf.add_n([tf.reduce_sum(g) for g in grads])  # one scalar: reading it waits for every gradient

        self.forward, self.step = forward, forward_backward
        with tf.device(self.device):
            image, visible = forward(*self.inputs)
            self.step(*self.inputs).numpy()  # traced and warmed up
            self.step(*self.inputs).numpy()
        self.reset_peak()
        return image.numpy(), int(visible), {}

    def time_iters(self, iters):
        with self.tf.device(self.device):
            self.step(*self.inputs).numpy()
            t0 = time.perf_counter()
            for _ in range(iters):
                out = self.step(*self.inputs)
            out.numpy()
            return (time.perf_counter() - t0) * 1e3 / iters

    def reset_peak(self):
        if self.device.startswith("/GPU"):
            self.tf.config.experimental.reset_memory_stats("GPU:0")

    def peak_mib(self):
        if not self.device.startswith("/GPU"):
            return None
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


class GsplatSide:
    """gsplat.rasterization forward + backward (torch.autograd.grad), on CUDA."""

    def __init__(self, device):
        import torch
        import gsplat

        if device != "gpu" or not torch.cuda.is_available():
            raise SystemExit("bench_splat_gsplat: the gsplat worker needs torch with CUDA (--device gpu)")
        self.torch, self.rasterization = torch, gsplat.rasterization
        self.dev = torch.device("cuda")
        self.versions = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                         "gsplat": getattr(gsplat, "__version__", None)}

    def load(self, d):
        torch = self.torch
        t = lambda k: torch.from_numpy(np.ascontiguousarray(d[k])).to(self.dev)  # noqa: E731
        self.inputs = [t(k).requires_grad_(True) for k in GRADIENT_INPUTS]
        self.viewmats, self.Ks = t("viewmat")[None], t("K")[None]
        self.backgrounds, self.upstream = t("background")[None], t("upstream")[None]
        self.width, self.height = int(d["width"]), int(d["height"])
        with torch.no_grad():
            image, _, meta = self.render(False)
        visible = int((meta["radii"] > 0).all(-1).sum())
        # gsplat's faster mode for forward + backward on these inputs.
        calibration = {}
        for packed in (False, True):
            self.packed = packed
            for _ in range(3):
                self.step()
            calibration[f"packed_{packed}_ms"] = self.time_iters(5)
        self.packed = calibration["packed_True_ms"] < calibration["packed_False_ms"]
        self.step()
        self.reset_peak()
        return image[0].detach().cpu().numpy(), visible, {"gsplat_packed": self.packed, **calibration}

    def render(self, packed):
        # The background composited here: gsplat 1.5.3's packed mode rejects a per-camera
        # `backgrounds` ([C, 3] fails its shape assertion), and the sum is the same.
        image, alpha, meta = self.rasterization(*self.inputs, self.viewmats, self.Ks, self.width, self.height,
                                                near_plane=NEAR_PLANE, eps2d=EPS2D, tile_size=TILE_SIZE,
                                                packed=packed, rasterize_mode="classic")
        return image + self.backgrounds[:, None, None, :] * (1.0 - alpha), alpha, meta

    def step(self):
        image, _, _ = self.render(self.packed)
        loss = (image * self.upstream).sum()
        return self.torch.autograd.grad(loss, self.inputs)

    def time_iters(self, iters):
        torch = self.torch
        self.step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            self.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / iters

    def reset_peak(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.reset_peak_memory_stats()

    def peak_mib(self):
        return self.torch.cuda.max_memory_allocated() / 2**20


def worker_main(kind, device):
    """Answers the parent's lines on stdin, one protocol line (TAG + JSON) each on stdout:
    'hello' -> versions; 'load NPZ IMAGE' -> renders once (the image saved to IMAGE .npy),
    warms up: visible count and side fields; 'round ITERS' -> ms per forward + backward;
    'peak' -> peak GPU MiB since the load; 'quit'."""
    side = (TFSide if kind == "tf" else GsplatSide)(device)
    reply = lambda **x: print(TAG + json.dumps(x), flush=True)  # noqa: E731
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "hello":
            reply(versions=side.versions)
        elif cmd == "load":
            with np.load(args[0]) as f:
                d = {k: f[k] for k in f.files}
            image, visible, fields = side.load(d)
            np.save(args[1], np.asarray(image, np.float32))
            reply(visible=visible, **fields)
        elif cmd == "round":
            reply(ms=side.time_iters(int(args[0])))
        elif cmd == "peak":
            reply(peak_mib=side.peak_mib())
        elif cmd == "quit":
            reply(bye=True)
            return 0
    return 0


# ---------------------------------------------------------------- parent

class Worker:
    def __init__(self, name, kind, device):
        self.name = name
        env = dict(os.environ)
        for name in ("LD_LIBRARY_PATH", "PYTHONPATH"):
            if kind == "gsplat" and "TORCH_" + name in env:
                # TensorFlow's CUDA 12 libraries (and stand-ins) on these paths are not torch's.
                env[name] = env["TORCH_" + name]
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_splat_gsplat", "--worker", kind,
                                      "--device", device], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1, env=env)

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        for out in self.proc.stdout:
            if out.startswith(TAG):
                return json.loads(out[len(TAG):])
            sys.stdout.write(f"[{self.name}] {out}")
        raise RuntimeError(f"the {self.name} worker exited (code {self.proc.wait()}) on {line!r}; its stderr is above")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.ask("quit")
            except (RuntimeError, OSError):
                pass
            self.proc.wait(timeout=60)


def gpu_driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if out.returncode != 0 or not out.stdout.strip():
        return None, None
    name, _, driver = out.stdout.strip().splitlines()[0].partition(",")
    return name.strip(), driver.strip()


def bench_size(workers, n, a, workdir):
    path = os.path.join(workdir, f"inputs_{n}.npz")
    np.savez(path, **make_inputs(n, a.width, a.height, seed=a.seed))
    loaded, images = {}, {}
    for w in workers:
        image_path = os.path.join(workdir, f"{w.name}_{n}.npy")
        t0 = time.perf_counter()
        loaded[w.name] = w.ask(f"load {path} {image_path}")
        print(f"  {w.name}: loaded, rendered and warmed up in {time.perf_counter() - t0:.1f} s")
        images[w.name] = np.load(image_path)
    (ours, ours_load), (theirs, theirs_load) = loaded.items()
    max_diff, psnr = image_agreement(images[ours], images[theirs])
    ms = {w.name: [] for w in workers}
    for r in range(a.rounds):
        for w in (workers if r % 2 == 0 else workers[::-1]):
            ms[w.name].append(w.ask(f"round {a.iters}")["ms"])
    peaks = {w.name: w.ask("peak")["peak_mib"] for w in workers}
    row = {"gaussians": n, "width": a.width, "height": a.height,
           f"{ours}_ms": statistics.median(ms[ours]), f"{theirs}_ms": statistics.median(ms[theirs]),
           "speedup": statistics.median(t / o for o, t in zip(ms[ours], ms[theirs])),
           f"{ours}_visible": ours_load["visible"], f"{theirs}_visible": theirs_load["visible"],
           "image_max_abs_diff": max_diff, "image_psnr_db": psnr,
           f"{ours}_peak_mib": peaks[ours], f"{theirs}_peak_mib": peaks[theirs],
           "rounds": a.rounds, "iters": a.iters, f"{ours}_round_ms": ms[ours], f"{theirs}_round_ms": ms[theirs]}
    row.update({k: v for k, v in theirs_load.items() if k != "visible"})
    return row


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_splat_gsplat", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,300000,1000000", help="numbers of Gaussians, comma-separated")
    p.add_argument("--width", type=int, default=800)
    p.add_argument("--height", type=int, default=800)
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds per size")
    p.add_argument("--iters", type=int, default=10, help="forward + backward calls timed per round and side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="cpu: the TF worker on the CPU")
    p.add_argument("--protocol-check", action="store_true",
                   help="both workers are the TF worker (checks this script's protocol where gsplat cannot run)")
    p.add_argument("--out", default=None, help="the JSON written (e.g. benchmarks/results/%s.h200.json)" % BENCHMARK)
    p.add_argument("--workdir", default=None, help="where the inputs and images go (default: a temporary folder)")
    p.add_argument("--worker", choices=("tf", "gsplat"), default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    if not a.sizes or min(a.sizes) < 1 or a.rounds < 1 or a.iters < 1 or a.width < 1 or a.height < 1:
        p.error("--sizes, --rounds, --iters, --width and --height must be positive")
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.worker:
        return worker_main(a.worker, a.device)
    names = [("tf", "tf"), ("tf_again" if a.protocol_check else "gsplat", "tf" if a.protocol_check else "gsplat")]
    workers = [Worker(name, kind, a.device) for name, kind in names]
    try:
        versions = {}
        for w in workers:
            versions.update(w.ask("hello")["versions"])
        gpu, driver = gpu_driver() if a.device == "gpu" else (None, None)
        print(f"GPU: {gpu} (driver {driver}); {timing.cpu_description()}")
        print("versions:", ", ".join(f"{k} {v}" for k, v in versions.items()))
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            workdir = a.workdir or tmp
            os.makedirs(workdir, exist_ok=True)
            for n in a.sizes:
                print(f"{n} Gaussians at {a.width}x{a.height}:")
                rows.append(bench_size(workers, n, a, workdir))
                if a.out:  # written after every size, so a later failure keeps the sizes done
                    write(a, rows, versions, gpu, driver)
    finally:
        for w in workers:
            w.close()
    ours, theirs = names[0][0], names[1][0]
    print(f"\n| Gaussians | {ours} ms | {theirs} ms | speedup ({theirs} / {ours}) | visible {ours} / {theirs} "
          f"| image max diff | image PSNR dB | peak MiB {ours} / {theirs} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        peak = lambda k: "-" if r[k] is None else f"{r[k]:.0f}"  # noqa: E731
        print(f"| {r['gaussians']} | {r[ours + '_ms']:.2f} | {r[theirs + '_ms']:.2f} | {r['speedup']:.2f} "
              f"| {r[ours + '_visible']} / {r[theirs + '_visible']} | {r['image_max_abs_diff']:.3g} "
              f"| {r['image_psnr_db']:.1f} | {peak(ours + '_peak_mib')} / {peak(theirs + '_peak_mib')} |")
    if "gsplat_packed" in rows[0]:
        print("gsplat packed mode per size:", [r["gsplat_packed"] for r in rows])
    return 0


def write(a, rows, versions, gpu, driver):
    data = {"device": f"GPU: {gpu}" if gpu else None, "machine": {"gpu_driver": driver}, "versions": versions,
            "settings": {"near_plane": NEAR_PLANE, "eps2d": EPS2D, "tile_size": TILE_SIZE, "channels": 3,
                         "background": "white", "rasterize_mode": "classic",
                         "inputs": " ".join(make_inputs.__doc__.split())},
            "rows": rows}
    timing.write_json(a.out, data)


if __name__ == "__main__":
    sys.exit(main())
