"""CPU benchmark of metal_ops.sh_encode against the NeRF sample's 16-TF-op
sh_encode (tests/reference/sh_encode.py: tf_composite, the composite the op
replaces), side by side in one process (checked equal first).

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
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402
from tests.reference.sh_encode import tf_composite  # noqa: E402


CALLS_PER_ROUND = 5  # one timed sample = this many calls (sub-millisecond calls)


def variants(degree, upstream):
    def fwd(encode):
        return lambda d: encode(d, degree)

    def fwd_bwd(encode):
        def f(d):
            with tf.GradientTape() as tape:
                tape.watch(d)
                y = encode(d, degree)
            return y, tape.gradient(y, d, output_gradients=upstream)
        return f

    ours = lambda d, k: metal_ops.sh_encode(d, degree=k)  # noqa: E731
    out = {}
    for kind, make in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        out[f"ours_{kind}"] = tf.function(make(ours))
        out[f"tf_{kind}"] = tf.function(make(tf_composite))
        out[f"xla_{kind}"] = tf.function(make(tf_composite), jit_compile=True)
    return out


def bench(n, degree, rounds, results):
    rng = np.random.default_rng(0)
    d = rng.normal(size=(n, 3))
    d = tf.constant((d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32))
    upstream = tf.constant(rng.normal(size=(n, degree * degree)).astype(np.float32))
    fns = variants(degree, upstream)
    # Same values and gradients first.
    for kind in ("fwd_bwd",):
        ours = fns[f"ours_{kind}"](d)
        for ref in ("tf", "xla"):
            theirs = fns[f"{ref}_{kind}"](d)
            for a, b in zip(ours, theirs):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)

    def repeated(fn):
        def run():
            for _ in range(CALLS_PER_ROUND):
                fn(d)
        return run

    times = timing.interleaved_ms({k: repeated(f) for k, f in fns.items()}, rounds, warmup=2)
    load = timing.load_average()
    print(f"sh_encode N={n} degree {degree} float32, wall ms per call (medians of {rounds} interleaved rounds of "
          f"{CALLS_PER_ROUND} calls); load average {load:.1f}")
    for kind in ("fwd", "fwd_bwd"):
        row = {"n": n, "degree": degree, "pass": kind, "rounds": rounds, "calls_per_round": CALLS_PER_ROUND,
               "load_average": load}
        for v in ("ours", "tf", "xla"):
            ms = timing.median_wall_ms(times[f"{v}_{kind}"]) / CALLS_PER_ROUND
            row[f"{v}_ms"] = ms
            row[f"{v}_directions_per_s"] = n / (ms * 1e-3)
        row["speedup_vs_tf_function"] = timing.median_ratio(times[f"tf_{kind}"], times[f"ours_{kind}"])
        row["speedup_vs_xla"] = timing.median_ratio(times[f"xla_{kind}"], times[f"ours_{kind}"])
        results.append(row)
        print(f"  {kind:8s} ours {row['ours_ms']:.3f} ms ({row['ours_directions_per_s'] / 1e6:.0f} M dirs/s) | "
              f"tf.function {row['tf_ms']:.3f} ms -> {row['speedup_vs_tf_function']:.1f}x | "
              f"XLA {row['xla_ms']:.3f} ms -> {row['speedup_vs_xla']:.1f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--out", default=timing.result_path("sh_encode"))
    args = ap.parse_args()
    results = []
    bench(98_304, 4, args.rounds, results)
    bench(98_304, 3, args.rounds, results)
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})


if __name__ == "__main__":
    main()
