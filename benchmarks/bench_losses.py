"""CPU benchmark of the fused loss ops against the pure-TF composites a user
would write, side by side in one process (both checked equal first).

- RobustLoss fwd+bwd (gradients w.r.t. x, alpha, scale), x of 2^22 float32
  ([65536, 64]), for scalar alpha / scale (two settings) and per-channel ones
  (C = 64, as AdaptiveRobustLoss uses them), vs Barron's reference lossfun
  transcribed to TF (every branch evaluated, tf.where select) in a graph and
  compiled by XLA (jit_compile=True); rounds interleaved (benchmarks/timing.py),
  speedups are medians of per-round ratios.
- DistortionLoss fwd+bwd (gradients w.r.t. weights and t), R = 4096,
  S in {64, 128, 256}, vs the O(S^2) double sum; peak resident memory of each
  (VmHWM after resetting it through /proc/self/clear_refs, Linux).

Ratios printed, JSON in benchmarks/results/losses_cpu.json.
Usage: .venv/bin/python benchmarks/bench_losses.py [--quick] [--only robust|distortion]
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402


def median_ms(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


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


def current_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_hwm_mib():
    return peak_rss_mib()


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
    base = peak_hwm_mib()
    [v.numpy() for v in fn(w, t)]
    return peak_hwm_mib() - base


def peak_extra_mib(variant, rays, samples):
    import subprocess
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-memory", variant, str(rays), str(samples)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


# ---- RobustLoss ----------------------------------------------------------------------
def robust_composite(x, alpha, scale):
    """google-research/robust_loss general.lossfun, transcribed."""
    eps = np.finfo(np.float32).eps
    z = tf.square(x / scale)
    loss_two = 0.5 * z
    loss_zero = tf.math.log1p(tf.minimum(0.5 * z, 3e37))
    loss_neginf = -tf.math.expm1(-0.5 * z)
    loss_posinf = tf.math.expm1(tf.minimum(0.5 * z, 87.5))
    beta_safe = tf.maximum(eps, tf.abs(alpha - 2.0))
    alpha_safe = tf.where(alpha >= 0, tf.ones_like(alpha), -tf.ones_like(alpha)) * tf.maximum(eps, tf.abs(alpha))
    loss_otherwise = (beta_safe / alpha_safe) * (tf.pow(z / beta_safe + 1.0, 0.5 * alpha) - 1.0)
    return tf.where(alpha == -np.inf, loss_neginf,
                    tf.where(alpha == 0, loss_zero,
                             tf.where(alpha == 2, loss_two,
                                      tf.where(alpha == np.inf, loss_posinf, loss_otherwise))))


def fwd_bwd(loss_fn, jit=False):
    @tf.function(jit_compile=jit)
    def step(x, alpha, scale):
        with tf.GradientTape() as tape:
            tape.watch([x, alpha, scale])
            loss = tf.reduce_sum(loss_fn(x, alpha, scale))
        return (loss,) + tuple(tape.gradient(loss, [x, alpha, scale]))
    return step


ROBUST_ROWS = (
    ("alpha=0.5, c=1 (scalars)", 0.5, 1.0),
    ("alpha=-3, c=0.1 (scalars)", -3.0, 0.1),
    ("alpha, c per channel (C=64)", "channels", "channels"),
)


def bench_robust(n, rounds, results):
    rng = np.random.default_rng(0)
    channels = 64
    x = tf.constant(rng.standard_normal((n // channels, channels)).astype(np.float32))
    variants = {"ours": fwd_bwd(metal_ops.robust_loss), "composite": fwd_bwd(robust_composite),
                "xla": fwd_bwd(robust_composite, jit=True)}
    print(f"robust_loss fwd+bwd, x [{n // channels}, {channels}] float32 (2^{int(np.log2(n))} elements); "
          f"wall ms, medians of {rounds} interleaved rounds; load {timing.load_average():.1f}")
    for label, a, c in ROBUST_ROWS:
        if a == "channels":
            alpha = tf.constant(rng.uniform(-3.0, 3.0, channels).astype(np.float32))
            scale = tf.constant(rng.uniform(0.05, 2.0, channels).astype(np.float32))
        else:
            alpha, scale = tf.constant(a), tf.constant(c)
        ref = [v.numpy() for v in variants["composite"](x, alpha, scale)]
        for name in ("ours", "xla"):
            got = [v.numpy() for v in variants[name](x, alpha, scale)]
            for u, v, what in zip(got, ref, ["loss", "dx", "dalpha", "dscale"]):
                np.testing.assert_allclose(u, v, rtol=2e-3, atol=1e-4 * max(1.0, np.abs(v).max()),
                                           err_msg=f"{name} {what} ({label})")
        times = timing.interleaved_ms(
            {name: (lambda f=f: [v.numpy() for v in f(x, alpha, scale)]) for name, f in variants.items()}, rounds)
        row = {"op": "robust_loss", "case": label, "n": n, "rounds": rounds, "load_average": timing.load_average()}
        for name in variants:
            row[f"{name}_ms"] = timing.median_wall_ms(times[name])
            row[f"{name}_melem_per_s"] = n / row[f"{name}_ms"] / 1e3
        row["speedup_vs_composite"] = timing.median_ratio(times["composite"], times["ours"])
        row["speedup_vs_xla"] = timing.median_ratio(times["xla"], times["ours"])
        results.append(row)
        print(f"  {label:30s} ours {row['ours_ms']:6.1f} ms ({row['ours_melem_per_s']:4.0f} Melem/s) | "
              f"graph {row['composite_ms']:6.1f} ms -> {row['speedup_vs_composite']:.2f}x | "
              f"XLA {row['xla_ms']:6.1f} ms -> {row['speedup_vs_xla']:.2f}x")


# ---- DistortionLoss ------------------------------------------------------------------
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


def bench_distortion(rays, samples, repeats, results):
    w, t = distortion_inputs(rays, samples)
    ours, comp = dist_fwd_bwd(metal_ops.distortion_loss), dist_fwd_bwd(distortion_composite)
    a, b = ours(w, t), comp(w, t)
    for u, v, name in zip(a, b, ["loss", "dw", "dt"]):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)
    run_ours = lambda: [v.numpy() for v in ours(w, t)]  # noqa: E731
    run_comp = lambda: [v.numpy() for v in comp(w, t)]  # noqa: E731
    t_ours = median_ms(run_ours, repeats * 3)
    t_comp = median_ms(run_comp, repeats)
    m_ours, m_comp = peak_extra_mib("ours", rays, samples), peak_extra_mib("composite", rays, samples)
    row = {"op": "distortion_loss", "rays": rays, "samples": samples, "ours_ms": t_ours, "composite_ms": t_comp,
           "speedup": t_comp / t_ours, "ours_peak_extra_mib": m_ours, "composite_peak_extra_mib": m_comp,
           "inputs_mib": (w.numpy().nbytes + t.numpy().nbytes) / 2**20}
    results.append(row)
    print(f"distortion_loss fwd+bwd R={rays} S={samples}: ours {t_ours:.2f} ms, O(S^2) TF {t_comp:.1f} ms -> "
          f"{row['speedup']:.0f}x; peak RSS growth of one call: ours {m_ours:.0f} MiB vs {m_comp:.0f} MiB "
          f"(inputs {row['inputs_mib']:.1f} MiB)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (RobustLoss)")
    parser.add_argument("--only", choices=["robust", "distortion"], help="one of the two benchmarks")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "losses_cpu.json"))
    parser.add_argument("--child-memory", nargs=3, metavar=("VARIANT", "RAYS", "SAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        variant, rays, samples = args.child_memory
        print(child_peak_memory(variant, int(rays), int(samples)))
        return
    repeats = 3 if args.quick else 7
    results = []
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, intra-op threads "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'default'}")
    if args.only != "distortion":
        bench_robust(2**22, 3 if args.quick else args.rounds, results)
    if args.only != "robust":
        for samples in (64, 128, 256):
            bench_distortion(4096, samples, max(3, repeats // 2), results)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    if args.only and os.path.exists(args.out):  # keep the other benchmark's rows
        with open(args.out) as f:
            kept = [r for r in json.load(f).get("results", [])
                    if r.get("op") != ("robust_loss" if args.only == "robust" else "distortion_loss")]
        results = kept + results if args.only == "distortion" else results + kept
    with open(args.out, "w") as f:
        json.dump({"cpus": os.cpu_count(), "tensorflow": tf.__version__, "command": " ".join(sys.argv),
                   "results": results}, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
