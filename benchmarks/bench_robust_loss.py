"""CPU benchmark of RobustLoss against the pure-TF composite a user would
write, side by side in one process (both checked equal first).

RobustLoss fwd+bwd (gradients w.r.t. x, alpha, scale), x of 2^22 float32
([65536, 64]), for scalar alpha / scale (two settings) and per-channel ones
(C = 64, as AdaptiveRobustLoss uses them), vs Barron's reference lossfun
transcribed to TF (every branch evaluated, tf.where select) in a graph and
compiled by XLA (jit_compile=True); rounds interleaved (benchmarks/timing.py),
speedups are medians of per-round ratios.

Ratios printed, JSON in benchmarks/results/robust_loss.cpu.json.
Usage (from the repository root): python -m benchmarks.bench_robust_loss [--quick] [--rounds N]
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "robust_loss.cpu": ("RobustLoss on the CPU",
                        "Loss and gradients for x, alpha and scale against the reference composite in a tf.function "
                        "and under XLA.",
                        [("case", "case"), ("N", "n"), ("ours ms", "ours_ms"), ("composite ms", "composite_ms"),
                         ("XLA ms", "xla_ms"), ("x composite", "speedup_vs_composite"), ("x XLA", "speedup_vs_xla"),
                         ("load", "load_average")]),
}


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


def main():
    args = timing.arguments("robust_loss", 7, "fewer rounds", out="--out").parse_args()
    results = []
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, intra-op threads "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'default'}")
    bench_robust(2**22, 3 if args.quick else args.rounds, results)
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})


if __name__ == "__main__":
    main()
