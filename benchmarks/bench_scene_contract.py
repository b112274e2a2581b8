"""CPU benchmark of metal_ops.scene_contract against the plain-TF formula a
user writes (tests/reference/scene_contract.py: tf_composite, tf.norm and
tf.where as nerfstudio's SceneContraction), side by side in one process
(checked equal first; benchmarks/against_tf.py).

N = 98,304 points (the `make demo` step: 4096 rays x 24 samples), float32,
norm "l2" and "linf": forward, and forward + backward (the gradient w.r.t.
the points, as a trainable sampler or pose refinement needs it), each in
tf.function; the formula also under XLA (jit_compile=True). Points lie at
radii from 0.05 to ~1e4 (both branches). Rounds are interleaved
(benchmarks/timing.py); speedups are medians of per-round ratios. JSON in
benchmarks/results/scene_contract.cpu.json.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_scene_contract [--rounds 60]
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import against_tf  # noqa: E402
from tests.reference.scene_contract import tf_composite  # noqa: E402


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "scene_contract.cpu": ("SceneContract on the CPU",
                           "Against the tf.norm / tf.where formula in a tf.function and under XLA.",
                           [("N", "n"), ("norm", "norm")] + against_tf.COLUMNS),
}


def bench(n, norm, rounds, results):
    rng = np.random.default_rng(0)
    x = tf.constant((rng.normal(size=(n, 3)) * np.exp(rng.uniform(-3, 9, (n, 1)))).astype(np.float32))
    upstream = tf.constant(rng.normal(size=(n, 3)).astype(np.float32))
    against_tf.bench(f"scene_contract N={n} norm {norm} float32", lambda v: metal_ops.scene_contract(v, norm=norm),
                     lambda v: tf_composite(v, norm), x, upstream, rounds, {"n": n, "norm": norm}, results)


if __name__ == "__main__":
    against_tf.main("scene_contract", [(98_304, "l2"), (98_304, "linf")], bench)
