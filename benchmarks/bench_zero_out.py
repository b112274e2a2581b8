"""CPU benchmark of ZeroOut against the TensorFlow composite a user would
write (tf.where on a flat-index comparison), side by side in one process
(checked equal first), rounds interleaved (benchmarks/timing.py), speedups
medians of per-round ratios.

Ratios printed, JSON in benchmarks/results/zero_out.cpu.json.
Usage (from the repository root): python -m benchmarks.bench_zero_out [--rounds N]
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "zero_out.cpu": ("ZeroOut on the CPU",
                     "The tutorial op against its one-line TF composite.",
                     [("N", "n"), ("ours ms", "ours_ms"), ("composite ms", "composite_ms"), ("x", "speedup"),
                      ("load", "load_average")]),
}


def composite(x, preserve_index):
    flat = tf.reshape(x, [-1])
    keep = tf.range(tf.size(flat, out_type=tf.int64)) == preserve_index
    return tf.reshape(tf.where(keep, flat, tf.zeros_like(flat)), tf.shape(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--out", default=timing.result_path("zero_out"))
    args = parser.parse_args()
    results = []
    ours = tf.function(lambda x: metal_ops.zero_out(x, preserve_index=12345))
    comp = tf.function(lambda x: composite(x, 12345))
    for n in (2**16, 2**22):
        x = tf.constant(np.arange(n, dtype=np.float32) + 1)
        np.testing.assert_array_equal(ours(x).numpy(), comp(x).numpy())
        times = timing.interleaved_ms({"ours": lambda: ours(x).numpy(), "composite": lambda: comp(x).numpy()},
                                      args.rounds)
        row = {"op": "zero_out", "n": n, "rounds": args.rounds, "load_average": timing.load_average(),
               "ours_ms": timing.median_wall_ms(times["ours"]),
               "composite_ms": timing.median_wall_ms(times["composite"]),
               "speedup": timing.median_ratio(times["composite"], times["ours"])}
        results.append(row)
        print(f"zero_out float32 n={n}: ours {row['ours_ms']:.3f} ms, tf.where composite {row['composite_ms']:.3f} ms"
              f" -> {row['speedup']:.2f}x (load {row['load_average']:.1f})")
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})


if __name__ == "__main__":
    main()
