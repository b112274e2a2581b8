"""CPU benchmark of metal_ops.trunc_exp against the tf.custom_gradient
composite a user writes (tests/reference/trunc_exp.py: tf_composite, exp
forward, dy * exp(clip(x, -15, 15)) backward), side by side in one process
(checked equal first; benchmarks/against_tf.py).

N = 98,304 elements (the NeRF density of the `make demo` step: 4096 rays x 24
samples) and 16x that, float32: forward, and forward + backward from a given
upstream gradient, each in tf.function; the composite also under XLA
(jit_compile=True). Rounds are interleaved (benchmarks/timing.py); speedups
are medians of per-round ratios. JSON in benchmarks/results/trunc_exp.cpu.json.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_trunc_exp [--rounds 60]
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import against_tf  # noqa: E402
from tests.reference.trunc_exp import tf_composite  # noqa: E402

REPORT = {
    "trunc_exp.cpu": ("TruncExp on the CPU",
                      "Against the tf.custom_gradient composite in a tf.function and under XLA.",
                      [("N", "n")] + against_tf.COLUMNS),
}


def bench(n, rounds, results):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-20, 20, n).astype(np.float32))
    upstream = tf.constant(rng.normal(size=n).astype(np.float32))
    against_tf.bench(f"trunc_exp N={n} float32", metal_ops.trunc_exp, tf_composite, x, upstream, rounds, {"n": n},
                     results, rtol=1e-5, atol=0)


if __name__ == "__main__":
    against_tf.main("trunc_exp", [(98_304,), (16 * 98_304,)], bench)
