"""CPU benchmark of metal_ops.sh_encode against the 16-TF-op composite it
replaces (tests/reference/sh_encode.py: tf_composite, the ops of the NeRF
sample's --mlp dense path), side by side in one process (checked equal first; benchmarks/against_tf.py).

N = 98,304 directions (the `make demo` step: 4096 rays x 24 samples), degree
4 (and 3), float32: forward, and forward + backward (gradient w.r.t. the
directions, as the colour network's training step needs it), each in
tf.function; the composite also under XLA (jit_compile=True). Rounds are
interleaved (benchmarks/timing.py); speedups are medians of per-round ratios;
directions/s printed. The backward starts from a given upstream gradient
(tape.gradient's output_gradients), so no loss ops are timed beside the
encoding. JSON in benchmarks/results/sh_encode.cpu.json.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_sh_encode [--rounds 60]
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import against_tf  # noqa: E402
from tests.reference.sh_encode import tf_composite  # noqa: E402


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "sh_encode.cpu": ("SHEncode on the CPU",
                      "Against the encoding as TF ops in a tf.function and under XLA.",
                      [("N", "n"), ("degree", "degree")] + against_tf.COLUMNS),
}


def bench(n, degree, rounds, results):
    rng = np.random.default_rng(0)
    d = rng.normal(size=(n, 3))
    d = tf.constant((d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32))
    upstream = tf.constant(rng.normal(size=(n, degree * degree)).astype(np.float32))
    against_tf.bench(f"sh_encode N={n} degree {degree} float32", lambda v: metal_ops.sh_encode(v, degree=degree),
                     lambda v: tf_composite(v, degree), d, upstream, rounds, {"n": n, "degree": degree}, results,
                     items=(n, "directions"))


if __name__ == "__main__":
    against_tf.main("sh_encode", [(98_304, 4), (98_304, 3)], bench)
