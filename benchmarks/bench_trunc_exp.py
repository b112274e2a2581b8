"""CPU benchmark of metal_ops.trunc_exp against the tf.custom_gradient
composite a user writes (tests/reference/trunc_exp.py: tf_composite, exp
forward, dy * exp(clip(x, -15, 15)) backward), side by side in one process
(checked equal first).

N = 98,304 elements (the NeRF density of the `make demo` step: 4096 rays x 24
samples) and 16x that, float32: forward, and forward + backward from a given
upstream gradient, each in tf.function; the composite also under XLA
(jit_compile=True). Rounds are interleaved (benchmarks/timing.py); speedups
are medians of per-round ratios. JSON in benchmarks/results/trunc_exp.cpu.json.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_trunc_exp [--rounds 60]
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402
from tests.reference.trunc_exp import tf_composite  # noqa: E402


CALLS_PER_ROUND = 5  # one timed sample = this many calls (sub-millisecond calls)


def variants(upstream):
    def fwd(f):
        return lambda x: f(x)

    def fwd_bwd(f):
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = f(x)
            return y, tape.gradient(y, x, output_gradients=upstream)
        return run

    out = {}
    for kind, make in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        out[f"ours_{kind}"] = tf.function(make(metal_ops.trunc_exp))
        out[f"tf_{kind}"] = tf.function(make(tf_composite))
        out[f"xla_{kind}"] = tf.function(make(tf_composite), jit_compile=True)
    return out


def bench(n, rounds, results):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-20, 20, n).astype(np.float32))
    upstream = tf.constant(rng.normal(size=n).astype(np.float32))
    fns = variants(upstream)
    ours = fns["ours_fwd_bwd"](x)
    for ref in ("tf", "xla"):
        for a, b in zip(ours, fns[f"{ref}_fwd_bwd"](x)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5)

    def repeated(fn):
        def run():
            for _ in range(CALLS_PER_ROUND):
                fn(x)
        return run

    times = timing.interleaved_ms({k: repeated(f) for k, f in fns.items()}, rounds, warmup=2)
    load = timing.load_average()
    print(f"trunc_exp N={n} float32, wall ms per call (medians of {rounds} interleaved rounds of "
          f"{CALLS_PER_ROUND} calls); load average {load:.1f}")
    for kind in ("fwd", "fwd_bwd"):
        row = {"n": n, "pass": kind, "rounds": rounds, "calls_per_round": CALLS_PER_ROUND, "load_average": load}
        for v in ("ours", "tf", "xla"):
            row[f"{v}_ms"] = timing.median_wall_ms(times[f"{v}_{kind}"]) / CALLS_PER_ROUND
        row["speedup_vs_tf_function"] = timing.median_ratio(times[f"tf_{kind}"], times[f"ours_{kind}"])
        row["speedup_vs_xla"] = timing.median_ratio(times[f"xla_{kind}"], times[f"ours_{kind}"])
        results.append(row)
        print(f"  {kind:8s} ours {row['ours_ms']:.3f} ms | tf.function {row['tf_ms']:.3f} ms -> "
              f"{row['speedup_vs_tf_function']:.2f}x | XLA {row['xla_ms']:.3f} ms -> {row['speedup_vs_xla']:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--out", default=timing.result_path("trunc_exp"))
    args = ap.parse_args()
    results = []
    bench(98_304, args.rounds, results)
    bench(16 * 98_304, args.rounds, results)
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})


if __name__ == "__main__":
    main()
