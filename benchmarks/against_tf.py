"""An op against the TensorFlow composite a user would write, side by side in
one process: the CPU benchmarks of the element-wise ops (the
benchmarks/bench_<op>.py that import this module) time ours and the composite in a
tf.function, the composite also under XLA (jit_compile=True), forward and
forward + backward from a given upstream gradient (tape.gradient's
output_gradients, so no loss ops are timed beside the op), in interleaved
rounds (benchmarks/timing.py), after checking that the values and gradients
agree."""
import numpy as np
import tensorflow as tf

from benchmarks import timing

CALLS_PER_ROUND = 5  # one timed sample = this many calls (sub-millisecond calls)


# The columns of bench()'s rows in docs/PERFORMANCE.md, after those of its
# `fields` (a benchmark's REPORT: [("N", "n"), ...] + against_tf.COLUMNS).
COLUMNS = [("pass", "pass"), ("ours ms", "ours_ms"), ("TF ms", "tf_ms"), ("XLA ms", "xla_ms"),
           ("x TF", "speedup_vs_tf_function"), ("x XLA", "speedup_vs_xla"), ("load", "load_average")]


def variants(ours, composite, upstream):
    """{'<ours|tf|xla>_<fwd|fwd_bwd>': tf.function of x}."""
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
        out[f"ours_{kind}"] = tf.function(make(ours))
        out[f"tf_{kind}"] = tf.function(make(composite))
        out[f"xla_{kind}"] = tf.function(make(composite), jit_compile=True)
    return out


def bench(label, ours, composite, x, upstream, rounds, fields, results, items=None, rtol=1e-5, atol=1e-5):
    """Times ours(x) against composite(x) and appends one row per pass to
    `results`: `fields`, then rounds, calls_per_round, load_average,
    <ours|tf|xla>_ms (per call), speedup_vs_tf_function, speedup_vs_xla, and
    with items=(count, name) <v>_<name>_per_s."""
    fns = variants(ours, composite, upstream)
    mine = fns["ours_fwd_bwd"](x)
    for ref in ("tf", "xla"):
        for a, b in zip(mine, fns[f"{ref}_fwd_bwd"](x)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=atol)

    def repeated(fn):
        def run():
            for _ in range(CALLS_PER_ROUND):
                fn(x)
        return run

    times = timing.interleaved_ms({k: repeated(f) for k, f in fns.items()}, rounds, warmup=2)
    load = timing.load_average()
    print(f"{label}, wall ms per call (medians of {rounds} interleaved rounds of {CALLS_PER_ROUND} calls); "
          f"load average {load:.1f}")
    for kind in ("fwd", "fwd_bwd"):
        row = {**fields, "pass": kind, "rounds": rounds, "calls_per_round": CALLS_PER_ROUND, "load_average": load}
        for v in ("ours", "tf", "xla"):
            row[f"{v}_ms"] = timing.median_wall_ms(times[f"{v}_{kind}"]) / CALLS_PER_ROUND
            if items:
                row[f"{v}_{items[1]}_per_s"] = items[0] / (row[f"{v}_ms"] * 1e-3)
        row["speedup_vs_tf_function"] = timing.median_ratio(times[f"tf_{kind}"], times[f"ours_{kind}"])
        row["speedup_vs_xla"] = timing.median_ratio(times[f"xla_{kind}"], times[f"ours_{kind}"])
        results.append(row)
        print(f"  {kind:8s} ours {row['ours_ms']:.3f} ms | tf.function {row['tf_ms']:.3f} ms -> "
              f"{row['speedup_vs_tf_function']:.2f}x | XLA {row['xla_ms']:.3f} ms -> {row['speedup_vs_xla']:.2f}x")


def main(benchmark, configs, run, rounds=60):
    """The main() of such a benchmark: run(*config, rounds, results) for each
    configuration, the rows written to --out (default
    benchmarks/results/<benchmark>.cpu.json)."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--out", default=timing.result_path(benchmark))
    args = ap.parse_args()
    results = []
    for config in configs:
        run(*config, args.rounds, results)
    timing.write_json(args.out, {"tensorflow": tf.__version__, "results": results})
