"""CPU benchmark of RayMarch against the ray marcher a TensorFlow user would
write without it, side by side in one process.

The composite takes every step of dt = step_size from the box entry to its
exit (no skipping of empty cells), looks each midpoint up in the occupancy
grid and packs the occupied steps with tf.where: the same samples up to
where the first step inside an occupied cell starts (RayMarch jumps over
empty cells to their boundary), so sample counts are printed for both. One
cascade, constant steps (the composite has neither cascades nor cone
stepping). Rounds interleaved (benchmarks/timing.py), speedups are medians of
per-round ratios; rays/s and samples/s of ours.

Usage (from the repository root): python -m benchmarks.bench_ray_march [--rounds N] [--quick]
JSON in benchmarks/results/ray_march.cpu.json.
"""
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402

AABB = [-1.5, -1.5, -1.5, 1.5, 1.5, 1.5]


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "ray_march.cpu": ("RayMarch on the CPU",
                      "One occupancy cascade against a fixed-step TF marcher.",
                      [("rays", "rays"), ("grid", "grid"), ("ours ms", "ours_ms"), ("TF ms", "composite_ms"),
                       ("x", "speedup"), ("M samples/s", "ours_msamples_s"), ("load", "load_average")]),
}


def scene(rays, g, seed=0):
    """Rays from a camera sphere of radius 4 at the box; a grid holding a sphere shell and a floor slab."""
    rng = np.random.default_rng(seed)
    cam = rng.normal(size=(rays, 3))
    cam = 4.0 * cam / np.linalg.norm(cam, axis=1, keepdims=True)
    target = rng.uniform(-1.0, 1.0, (rays, 3))
    dirs = target - cam
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    c = (np.arange(g) + 0.5) / g * 3.0 - 1.5
    z, y, x = np.meshgrid(c, c, c, indexing="ij")
    r = np.sqrt(x * x + y * y + z * z)
    occ = ((r > 0.6) & (r < 0.9)) | ((z > -1.1) & (z < -0.9))
    return (cam.astype(np.float32), dirs.astype(np.float32), np.full(rays, 2.0, np.float32),
            np.full(rays, 6.0, np.float32), occ[None])


def composite_march(origins, dirs, near, far, occ_flat, g, step):
    """Fixed steps through the box, occupancy lookups, packed with tf.where."""
    lo, hi = tf.constant(AABB[:3]), tf.constant(AABB[3:])
    inv = 1.0 / tf.where(tf.abs(dirs) < 1e-9, 1e-9, dirs)
    ta, tb = (lo - origins) * inv, (hi - origins) * inv
    t0 = tf.maximum(tf.reduce_max(tf.minimum(ta, tb), -1), near)
    t1 = tf.minimum(tf.reduce_min(tf.maximum(ta, tb), -1), far)
    steps = int(math.ceil(math.sqrt(3) * (AABB[3] - AABB[0]) / step)) + 1
    t = t0[:, None] + step * tf.range(steps, dtype=tf.float32)[None, :]
    t_end = tf.minimum(t + step, t1[:, None])
    x = origins[:, None, :] + 0.5 * (t + t_end)[..., None] * dirs[:, None, :]
    cell = tf.clip_by_value(tf.cast(tf.floor((x - lo) / (hi - lo) * g), tf.int32), 0, g - 1)
    flat = cell[..., 0] + g * (cell[..., 1] + g * cell[..., 2])
    keep = (t < t1[:, None]) & tf.gather(occ_flat, flat)
    idx = tf.where(keep)
    return tf.gather_nd(t, idx), tf.gather_nd(t_end, idx), tf.cast(idx[:, 0], tf.int32)


def bench(rays, g, step, rounds, results):
    origins, dirs, near, far, occ = scene(rays, g)
    bits = metal_ops.pack_occupancy(occ)
    occ_flat = tf.constant(occ.reshape(-1))
    args = [tf.constant(a) for a in (origins, dirs, near, far)]
    ours = tf.function(autograph=False, func=lambda o, d, n, f: metal_ops.ray_march(o, d, n, f, bits, aabb=AABB, grid_resolution=g,
                                                              step_size=step, max_samples=4096)[:3])
    comp = tf.function(autograph=False, func=lambda o, d, n, f: composite_march(o, d, n, f, occ_flat, g, step))
    n_ours = int(ours(*args)[0].shape[0])
    n_comp = int(comp(*args)[0].shape[0])
    row = {"op": "ray_march", "rays": rays, "grid": g, "step": step, "rounds": rounds,
           **timing.ours_vs_composite(ours, comp, args, rounds), "ours_samples": n_ours, "composite_samples": n_comp}
    t_ours, t_comp = row["ours_ms"], row["composite_ms"]
    row.update(ours_mrays_s=rays / t_ours / 1e3, ours_msamples_s=n_ours / t_ours / 1e3)
    results.append(row)
    print(f"ray_march R={rays} G={g} dt={step:.4f}: ours {t_ours:.2f} ms ({row['ours_mrays_s']:.2f} Mrays/s, "
          f"{row['ours_msamples_s']:.1f} Msamples/s, {n_ours} samples), fixed-step TF {t_comp:.1f} ms "
          f"({n_comp} samples) -> {row['speedup']:.1f}x (load {row['load_average']:.1f})", flush=True)


def main():
    step = math.sqrt(3) * 3  # the AABB's diagonal
    timing.run_configs("ray_march", [(4096, 64, step / 512), (65536, 64, step / 512), (4096, 128, step / 1024)],
                       bench)


if __name__ == "__main__":
    main()
