"""CPU benchmark of DistortionLoss against the O(S^2) double sum in pure TF,
side by side in one process (both checked equal first).

DistortionLoss fwd+bwd (gradients w.r.t. weights and t), R = 4096,
S in {64, 128, 256}; rounds interleaved (benchmarks/timing.py), speedups are
medians of per-round ratios; peak resident memory of each (VmHWM after
resetting it through /proc/self/clear_refs, Linux), one fresh process per
variant.

Ratios printed, JSON in benchmarks/results/distortion_loss.cpu.json.
Usage (from the repository root): python -m benchmarks.bench_distortion_loss [--quick] [--rounds N]
"""
import argparse
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "distortion_loss.cpu": ("DistortionLoss on the CPU",
                            "Forward + backward against the O(R S^2) TF composite, R = 4096 rays.",
                            [("samples", "samples"), ("ours ms", "ours_ms"), ("composite ms", "composite_ms"),
                             ("x", "speedup"), ("composite extra MiB", "composite_peak_extra_mib")]),
}


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def distortion_inputs(rays, samples):
    rng = np.random.default_rng(1)
    gaps = rng.uniform(0.1, 1.1, size=(rays, samples + 1))
    t = 2.0 + 4.0 * np.cumsum(gaps, 1) / gaps.sum(1, keepdims=True)
    t = np.concatenate([np.full((rays, 1), 2.0), t[:, :-1]], 1).astype(np.float32)
    w = rng.uniform(size=(rays, samples))
    w = (w / w.sum(1, keepdims=True)).astype(np.float32)
    return tf.constant(w), tf.constant(t)


def child_peak_memory(variant, rays, samples):
    """Runs in a fresh process: peak RSS growth of one fwd+bwd call (MiB).

    A small call first initialises the runtime and traces; the peak (VmHWM)
    before the measured call is the baseline, so what is left is the call's
    own working memory (TF's CPU allocator returns it to the OS afterwards,
    which is why this is measured in a fresh process).
    """
    fn = dist_fwd_bwd(metal_ops.distortion_loss if variant == "ours" else distortion_composite)
    w_small, t_small = distortion_inputs(8, samples)
    [v.numpy() for v in fn(w_small, t_small)]
    w, t = distortion_inputs(rays, samples)
    reset_peak_rss()
    base = peak_rss_mib()
    [v.numpy() for v in fn(w, t)]
    return peak_rss_mib() - base


def peak_extra_mib(variant, rays, samples):
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_distortion_loss", "--child-memory", variant,
                          str(rays), str(samples)], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def distortion_composite(w, t):
    m = 0.5 * (t[:, 1:] + t[:, :-1])
    d = t[:, 1:] - t[:, :-1]
    bi = tf.reduce_sum(w[:, :, None] * w[:, None, :] * tf.abs(m[:, :, None] - m[:, None, :]), axis=[1, 2])
    return bi + tf.reduce_sum(w * w * d, axis=-1) / 3


def dist_fwd_bwd(loss_fn):
    @tf.function(jit_compile=False)
    def step(w, t):
        with tf.GradientTape() as tape:
            tape.watch([w, t])
            loss = tf.reduce_sum(loss_fn(w, t))
        return (loss,) + tuple(tape.gradient(loss, [w, t]))
    return step


def bench_distortion(rays, samples, rounds, results):
    w, t = distortion_inputs(rays, samples)
    ours, comp = dist_fwd_bwd(metal_ops.distortion_loss), dist_fwd_bwd(distortion_composite)
    a, b = ours(w, t), comp(w, t)
    for u, v, name in zip(a, b, ["loss", "dw", "dt"]):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)
    times = timing.interleaved_ms({"ours": lambda: [v.numpy() for v in ours(w, t)],
                                   "composite": lambda: [v.numpy() for v in comp(w, t)]}, rounds)
    t_ours, t_comp = timing.median_wall_ms(times["ours"]), timing.median_wall_ms(times["composite"])
    m_ours, m_comp = peak_extra_mib("ours", rays, samples), peak_extra_mib("composite", rays, samples)
    row = {"op": "distortion_loss", "rays": rays, "samples": samples, "rounds": rounds,
           "load_average": timing.load_average(), "ours_ms": t_ours, "composite_ms": t_comp,
           "speedup": timing.median_ratio(times["composite"], times["ours"]), "ours_peak_extra_mib": m_ours,
           "composite_peak_extra_mib": m_comp, "inputs_mib": (w.numpy().nbytes + t.numpy().nbytes) / 2**20}
    results.append(row)
    print(f"distortion_loss fwd+bwd R={rays} S={samples}: ours {t_ours:.2f} ms, O(S^2) TF {t_comp:.1f} ms -> "
          f"{row['speedup']:.0f}x; peak RSS growth of one call: ours {m_ours:.0f} MiB vs {m_comp:.0f} MiB "
          f"(inputs {row['inputs_mib']:.1f} MiB; load {row['load_average']:.1f})")


def main():
    parser = timing.arguments("distortion_loss", 7, "fewer rounds", out="--out")
    parser.add_argument("--child-memory", nargs=3, metavar=("VARIANT", "RAYS", "SAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        variant, rays, samples = args.child_memory
        print(child_peak_memory(variant, int(rays), int(samples)))
        return
    results = []
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, intra-op threads "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'default'}")
    for samples in (64, 128, 256):
        bench_distortion(4096, samples, 3 if args.quick else args.rounds, results)
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})


if __name__ == "__main__":
    main()
