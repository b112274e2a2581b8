"""CPU benchmark of PackedVolumeRender against the packed renderer a
TensorFlow user would write without it, side by side in one process,
forward + backward (the training step's cost).

The composite (what nerfacc's render_weight_from_density does, in TF ops):
tau = sigma * (t_end - t_start), a global exclusive tf.cumsum minus each ray's
start value gathered with ray_indices for the per-ray exclusive sum,
T = exp(-cum), alpha = -expm1(-tau), w = T alpha zeroed where T < eps, then
tf.math.segment_sum of w * rgb, w and w * mid over the sorted ray indices,
the background composited; gradients by autodiff. Samples per ray vary
(uniform in [0, 2 * mean]), as RayMarch's output does. Rounds interleaved
(benchmarks/timing.py), speedups are medians of per-round ratios.

Usage (from the repository root):
    flock /tmp/tfmo-bench.lock python -m benchmarks.bench_packed_volume_render [--rounds N] [--quick]
JSON in benchmarks/results/packed_volume_render.cpu.json.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402
from tests.reference import packed_volume_render as ref  # noqa: E402

EPS = 1e-4


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "packed_volume_render.cpu": ("PackedVolumeRender on the CPU",
                                 "Forward + backward against the segment-sum / cumsum renderer a TF user writes.",
                                 [("rays", "rays"), ("samples", "samples"), ("ours ms", "ours_ms"),
                                  ("composite ms", "composite_ms"), ("x", "speedup"),
                                  ("M samples/s", "ours_msamples_s"), ("composite gradient error", "max_grad_diff"),
                                  ("load", "load_average")]),
}


def composite_render(sigma, rgb, t0, t1, ray_indices, offsets, rays, background, eps=EPS):
    """Packed volume rendering from TF ops (segment sums over sorted ray indices)."""
    tau = sigma * (t1 - t0)
    cs = tf.cumsum(tau, exclusive=True)
    cum = cs - tf.gather(tf.gather(cs, offsets, batch_dims=0), ray_indices) if rays > 0 else cs
    trans = tf.exp(-cum)
    w = tf.where(trans < eps, tf.zeros_like(trans), trans * -tf.math.expm1(-tau))
    colour = tf.math.segment_sum(w[:, None] * rgb, ray_indices)
    opacity = tf.math.segment_sum(w, ray_indices)
    depth = tf.math.segment_sum(w * 0.5 * (t0 + t1), ray_indices)
    return colour + background * (1.0 - opacity)[:, None], depth, opacity


def bench(rays, mean_samples, rounds, results):
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 2 * mean_samples + 1, size=rays)
    counts[-1] = max(counts[-1], 1)  # segment_sum's output has one row per ray up to the last non-empty one
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed(counts, seed=1, surface=True)
    ray_indices = np.repeat(np.arange(rays, dtype=np.int32), counts)
    n = int(counts.sum())
    bg = tf.constant([1.0, 1.0, 1.0])
    sigma_v, rgb_v = tf.Variable(sigma), tf.Variable(rgb)
    const = [tf.constant(a) for a in (t0, t1, offsets, counts, ray_indices)]
    cot = tf.constant(rng.normal(size=(rays, 3)).astype(np.float32))

    @tf.function(autograph=False)
    def ours(t0, t1, offsets, counts, ray_indices):
        with tf.GradientTape() as tape:
            out = metal_ops.packed_volume_render(sigma_v, rgb_v, t0, t1, offsets, counts, background=bg,
                                                 early_termination=EPS)
            loss = tf.reduce_sum(cot * out.rgb) + tf.reduce_sum(out.depth)
        return tape.gradient(loss, [sigma_v, rgb_v])

    @tf.function(autograph=False)
    def comp(t0, t1, offsets, counts, ray_indices):
        with tf.GradientTape() as tape:
            rgb_out, depth, _ = composite_render(sigma_v, rgb_v, t0, t1, ray_indices, offsets, rays, bg)
            loss = tf.reduce_sum(cot * rgb_out) + tf.reduce_sum(depth)
        return tape.gradient(loss, [sigma_v, rgb_v])

    g_ours, g_comp = ours(*const), comp(*const)
    err = max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(g_ours, g_comp))
    row = {"op": "packed_volume_render", "rays": rays, "mean_samples": mean_samples, "samples": n,
           "rounds": rounds, **timing.ours_vs_composite(ours, comp, const, rounds), "max_grad_diff": err}
    t_ours, t_comp = row["ours_ms"], row["composite_ms"]
    row["ours_msamples_s"] = n / t_ours / 1e3
    results.append(row)
    print(f"packed_volume_render fwd+bwd R={rays} N={n} (mean {mean_samples}/ray): ours {t_ours:.2f} ms "
          f"({row['ours_msamples_s']:.1f} Msamples/s), TF segment_sum/cumsum {t_comp:.2f} ms -> "
          f"{row['speedup']:.2f}x (max |grad diff| {err:.1e}, load {row['load_average']:.1f})", flush=True)


def main():
    timing.run_configs("packed_volume_render", [(4096, 24), (4096, 96), (65536, 16)], bench)


if __name__ == "__main__":
    main()
