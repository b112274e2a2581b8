"""CPU benchmark of metal_ops.scene_contract against the plain-TF formula a
user writes (tests/reference/scene_contract.py: tf_composite, tf.norm and
tf.where as nerfstudio's SceneContraction), side by side in one process
(checked equal first).

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
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402
from tests.reference.scene_contract import tf_composite  # noqa: E402


CALLS_PER_ROUND = 5  # one timed sample = this many calls (sub-millisecond calls)


def variants(norm, upstream):
    def fwd(contract):
        return lambda x: contract(x, norm)

    def fwd_bwd(contract):
        def f(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = contract(x, norm)
            return y, tape.gradient(y, x, output_gradients=upstream)
        return f

    ours = lambda x, k: metal_ops.scene_contract(x, norm=k)  # noqa: E731
    out = {}
    for kind, make in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        out[f"ours_{kind}"] = tf.function(make(ours))
        out[f"tf_{kind}"] = tf.function(make(tf_composite))
        out[f"xla_{kind}"] = tf.function(make(tf_composite), jit_compile=True)
    return out


def bench(n, norm, rounds, results):
    rng = np.random.default_rng(0)
    x = tf.constant((rng.normal(size=(n, 3)) * np.exp(rng.uniform(-3, 9, (n, 1)))).astype(np.float32))
    upstream = tf.constant(rng.normal(size=(n, 3)).astype(np.float32))
    fns = variants(norm, upstream)
    ours = fns["ours_fwd_bwd"](x)
    for ref in ("tf", "xla"):
        for a, b in zip(ours, fns[f"{ref}_fwd_bwd"](x)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)

    def repeated(fn):
        def run():
            for _ in range(CALLS_PER_ROUND):
                fn(x)
        return run

    times = timing.interleaved_ms({k: repeated(f) for k, f in fns.items()}, rounds, warmup=2)
    load = timing.load_average()
    print(f"scene_contract N={n} norm {norm} float32, wall ms per call (medians of {rounds} interleaved rounds of "
          f"{CALLS_PER_ROUND} calls); load average {load:.1f}")
    for kind in ("fwd", "fwd_bwd"):
        row = {"n": n, "norm": norm, "pass": kind, "rounds": rounds, "calls_per_round": CALLS_PER_ROUND,
               "load_average": load}
        for v in ("ours", "tf", "xla"):
            row[f"{v}_ms"] = timing.median_wall_ms(times[f"{v}_{kind}"]) / CALLS_PER_ROUND
        row["speedup_vs_tf_function"] = timing.median_ratio(times[f"tf_{kind}"], times[f"ours_{kind}"])
        row["speedup_vs_xla"] = timing.median_ratio(times[f"xla_{kind}"], times[f"ours_{kind}"])
        results.append(row)
        print(f"  {kind:8s} ours {row['ours_ms']:.3f} ms | tf.function {row['tf_ms']:.3f} ms -> "
              f"{row['speedup_vs_tf_function']:.1f}x | XLA {row['xla_ms']:.3f} ms -> {row['speedup_vs_xla']:.1f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--out", default=timing.result_path("scene_contract"))
    args = ap.parse_args()
    results = []
    for norm in ("l2", "linf"):
        bench(98_304, norm, args.rounds, results)
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})


if __name__ == "__main__":
    main()
