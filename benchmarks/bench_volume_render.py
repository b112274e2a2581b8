"""VolumeRender on the CPU: our fused op vs the composite the Keras NeRF example
writes (1 - exp, exclusive cumprod of (1 - alpha + 1e-10), reduce_sum), side by
side in one process, both inside tf.function, same inputs, verified equal first.

R = 4096 rays x S = 64 samples (float32), forward and forward + backward
(gradients of sum(rgb) + sum(depth) + sum(opacity) w.r.t. sigma and rgb).
Two scenes: "random" (densities in [0, 2), no ray reaches the threshold) and
"surface" (one opaque sample per ray: early termination skips the rest; the
composite has no early termination). Ours is timed with early_termination
1e-4 (the default) and 0. The six variants are called round-robin so they see
the same machine load; medians (and minima) over repeats; ratios, throughput
and the load average printed;
JSON in benchmarks/results/volume_render.cpu.json.

    .venv/bin/python -m benchmarks.bench_volume_render [--rays 4096] [--samples 64] [--repeats 50]
"""
import argparse
import json
import os
import platform

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402
from tests.reference import volume_render as ref  # noqa: E402


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "volume_render.cpu": ("VolumeRender on the CPU",
                          "R = 4096 rays, 64 samples, against the TF composite.",
                          [("scene", "name"), ("fwd + bwd ms", "ours_forward_backward_ms"),
                           ("composite ms", "composite_forward_backward_ms"), ("x forward", "speedup_forward"),
                           ("x fwd + bwd", "speedup_forward_backward")]),
}


def composite(sigma, rgb, t, background):
    """The Keras NeRF example's rendering, with our interval convention."""
    delta = t[:, 1:] - t[:, :-1]
    alpha = 1.0 - tf.exp(-sigma * delta)
    transmittance = tf.math.cumprod(1.0 - alpha + 1e-10, axis=-1, exclusive=True)
    weights = alpha * transmittance
    opacity = tf.reduce_sum(weights, axis=-1)
    rgb_out = tf.reduce_sum(weights[..., None] * rgb, axis=-2) + background * (1.0 - opacity)[:, None]
    depth = tf.reduce_sum(weights * 0.5 * (t[:, 1:] + t[:, :-1]), axis=-1)
    return rgb_out, depth, opacity


def ours(eps):
    def render(sigma, rgb, t, background):
        out = metal_ops.volume_render(sigma, rgb, t, background=background, early_termination=eps)
        return out.rgb, out.depth, out.opacity

    return render


def make_steps(render):
    @tf.function
    def forward(sigma, rgb, t, background):
        return render(sigma, rgb, t, background)

    @tf.function
    def forward_backward(sigma, rgb, t, background):
        with tf.GradientTape() as tape:
            tape.watch([sigma, rgb])
            c, d, o = render(sigma, rgb, t, background)
            loss = tf.reduce_sum(c) + tf.reduce_sum(d) + tf.reduce_sum(o)
        return tape.gradient(loss, [sigma, rgb])

    return forward, forward_backward


def _result(fn, inputs):
    """fn(*inputs) run to completion (its outputs read back)."""
    return lambda: [x.numpy() for x in tf.nest.flatten(fn(*inputs))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rays", type=int, default=4096)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", default=timing.result_path("volume_render"))
    args = parser.parse_args()
    R, S = args.rays, args.samples
    results = {
        "rays": R, "samples": S, "dtype": "float32", "repeats": args.repeats,
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "tensorflow": tf.__version__, "method": "tf.function, median wall time per call (ms)", "scenes": {},
    }
    for scene in ["random", "surface"]:
        sigma_np, rgb_np, t_np = ref.make_rays(R, S, seed=1, surface=(scene == "surface"))
        inputs = [tf.constant(x) for x in (sigma_np, rgb_np, t_np, np.array([0.1, 0.2, 0.3], np.float32))]

        # Verified equal first: ours without early termination vs the composite
        # (forward outputs and the gradients).
        comp_fwd, comp_fb = make_steps(composite)
        ours0_fwd, ours0_fb = make_steps(ours(0.0))
        ours_fwd, ours_fb = make_steps(ours(1e-4))
        for a, b in zip(ours0_fwd(*inputs), comp_fwd(*inputs)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)
        if scene == "random":  # opaque samples make the composite's cumprod gradient ill-conditioned
            for a, b in zip(ours0_fb(*inputs), comp_fb(*inputs)):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-3 * float(np.abs(b).max()))
        want = ref.render(sigma_np, rgb_np, t_np, inputs[3].numpy(), 1e-4)
        for a, b in zip(ours_fwd(*inputs), want[:3]):
            np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-4)

        load_before = os.getloadavg()[0]
        names = ["composite_forward", "composite_forward_backward", "ours_forward", "ours_forward_backward",
                 "ours_no_early_termination_forward", "ours_no_early_termination_forward_backward"]
        fns = [comp_fwd, comp_fb, ours_fwd, ours_fb, ours0_fwd, ours0_fb]
        times = timing.interleaved_ms({n: _result(f, inputs) for n, f in zip(names, fns)}, args.repeats, warmup=5)
        row = {f"{n}_ms": timing.median_wall_ms(times[n]) for n in names}
        row["min_ms"] = {n: min(w for w, _ in times[n]) for n in names}
        row["speedup_forward_backward_of_minima"] = row["min_ms"]["composite_forward_backward"] / row["min_ms"][
            "ours_forward_backward"]
        row["load_average_1min"] = [load_before, os.getloadavg()[0]]
        row["speedup_forward"] = row["composite_forward_ms"] / row["ours_forward_ms"]
        row["speedup_forward_backward"] = row["composite_forward_backward_ms"] / row["ours_forward_backward_ms"]
        row["speedup_forward_backward_no_early_termination"] = (
            row["composite_forward_backward_ms"] / row["ours_no_early_termination_forward_backward_ms"])
        row["ours_samples_per_s_forward_backward"] = R * S / (row["ours_forward_backward_ms"] * 1e-3)
        row["composite_samples_per_s_forward_backward"] = R * S / (row["composite_forward_backward_ms"] * 1e-3)
        results["scenes"][scene] = row
        print(f"[{scene}] R={R} S={S}")
        print(f"  composite: fwd {row['composite_forward_ms']:.3f} ms, fwd+bwd {row['composite_forward_backward_ms']:.3f} ms "
              f"({row['composite_samples_per_s_forward_backward'] / 1e6:.1f} M samples/s)")
        print(f"  ours (early_termination=1e-4): fwd {row['ours_forward_ms']:.3f} ms, fwd+bwd "
              f"{row['ours_forward_backward_ms']:.3f} ms ({row['ours_samples_per_s_forward_backward'] / 1e6:.1f} M samples/s)")
        print(f"  ours (early_termination=0):    fwd {row['ours_no_early_termination_forward_ms']:.3f} ms, fwd+bwd "
              f"{row['ours_no_early_termination_forward_backward_ms']:.3f} ms")
        print(f"  speedup: fwd {row['speedup_forward']:.1f}x, fwd+bwd {row['speedup_forward_backward']:.1f}x "
              f"(no early termination: {row['speedup_forward_backward_no_early_termination']:.1f}x)")
        print(f"  minima: composite fwd+bwd {row['min_ms']['composite_forward_backward']:.3f} ms, ours "
              f"{row['min_ms']['ours_forward_backward']:.3f} ms "
              f"({row['speedup_forward_backward_of_minima']:.1f}x); 1-min load average "
              f"{row['load_average_1min'][0]:.1f} -> {row['load_average_1min'][1]:.1f} on {os.cpu_count()} cores",
              flush=True)
    timing.write_json(args.out, results)


if __name__ == "__main__":
    main()
