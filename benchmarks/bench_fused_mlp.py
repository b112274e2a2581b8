"""FusedMLP on the CPU against what a user writes instead, side by side in one
process: a Keras Dense stack in tf.function, and the same stack compiled by
XLA (jit_compile=True). Forward + backward (gradients for x and every
weight), or with --inference the forward alone in a tf.function with no tape
(FusedMLP then keeps no saved activations; "fused_saved", the same op with
its saved activations consumed, times what skipping them saves), of the NeRF
colour network (31 -> 64 -> 64 -> 3, relu, sigmoid output) and density
network (32 -> 64 -> 16, trunc_exp output), N = 98,304 points. Rounds
interleaved (benchmarks/timing.py), speedups are medians of per-round
ratios; JSON in benchmarks/results/fused_mlp{,_inference}.cpu.json.

    .venv/bin/python -m benchmarks.bench_fused_mlp [--rounds 7] [--n 98304] [--inference]
"""
import argparse
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from metal_ops._loader import load_library  # noqa: E402
from benchmarks import timing  # noqa: E402

NETS = {
    "colour 31-64-64-3": (31, 64, 2, 3, "relu", "sigmoid"),
    "density 32-64-16": (32, 64, 1, 16, "relu", "trunc_exp"),
}


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "fused_mlp.cpu": ("FusedMLP on the CPU, forward + backward",
                      "The layer against a Keras Dense stack and the stack under XLA, N = 98,304 rows.",
                      [("network", "net"), ("fused ms", "fused_ms"), ("Dense ms", "dense_ms"), ("XLA ms", "xla_ms"),
                       ("x Dense", "speedup_vs_dense"), ("x XLA", "speedup_vs_xla"),
                       ("fused GFLOP/s", "fused_gflop_per_s"), ("load", "load_average")]),
    "fused_mlp_inference.cpu": ("FusedMLP on the CPU, inference",
                                "The forward in a `tf.function` without saved activations (`--inference`); \"saved\" "
                                "keeps them as training does.",
                                [("network", "net"), ("fused ms", "fused_ms"), ("saved ms", "fused_saved_ms"),
                                 ("Dense ms", "dense_ms"), ("XLA ms", "xla_ms"), ("x Dense", "speedup_vs_dense"),
                                 ("x XLA", "speedup_vs_xla"), ("x saved", "speedup_vs_fused_saved"),
                                 ("load", "load_average")]),
}


def dense_stack(kernels, biases, act, out_act):
    out = {"sigmoid": tf.sigmoid, "trunc_exp": tf.exp, "none": tf.identity}[out_act]

    def f(x):
        h = x
        for k, b in zip(kernels[:-1], biases[:-1]):
            h = tf.nn.relu(tf.matmul(h, k) + b)
        return out(tf.matmul(h, kernels[-1]) + biases[-1])
    return f


def fwd_bwd(fn, variables, jit=False):
    @tf.function(jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(fn(x)))
        return tape.gradient(loss, [x] + variables)
    return step


def forward(fn, jit=False):
    @tf.function(jit_compile=jit)
    def call(x):
        return [fn(x)]
    return call


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--n", type=int, default=98304)
    p.add_argument("--inference", action="store_true", help="the forward alone, no tape")
    p.add_argument("--out", default=None, help="JSON (default benchmarks/results/fused_mlp[_inference].cpu.json)")
    a = p.parse_args()
    a.out = a.out or timing.result_path("fused_mlp_inference" if a.inference else "fused_mlp")
    rng = np.random.default_rng(0)
    results = []
    mode = "forward" if a.inference else "fwd+bwd"
    print(f"TensorFlow {tf.__version__}, {timing.cpu_description()}, N = {a.n:,}, {mode} wall ms, medians of "
          f"{a.rounds} interleaved rounds, load {timing.load_average():.1f}")
    for label, (i, w, hidden, o, act, out_act) in NETS.items():
        dims = [i] + [w] * hidden + [o]
        kernels = [tf.Variable((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32))
                   for m, n in zip(dims[:-1], dims[1:])]
        biases = [tf.Variable(np.zeros(n, np.float32)) for n in dims[1:]]
        x = tf.constant(rng.uniform(-1, 1, (a.n, i)).astype(np.float32))
        variables = kernels + biases

        def ours(v):
            return metal_ops.fused_mlp(v, kernels, biases, activation=act, output_activation=out_act)

        contenders = {}
        if a.inference:
            fused, dense = forward(ours), forward(dense_stack(kernels, biases, act, out_act))
            xla = forward(dense_stack(kernels, biases, act, out_act), jit=True)

            @tf.function
            def fused_saved(v):
                y, saved = load_library().metal_ops_fused_mlp(v, kernels, biases, activation=act,
                                                              output_activation=out_act)
                return [y, saved[0, 0, 0]]  # consumed: written in full
            contenders["fused_saved"] = fused_saved
        else:
            fused = fwd_bwd(ours, variables)
            dense = fwd_bwd(dense_stack(kernels, biases, act, out_act), variables)
            xla = fwd_bwd(dense_stack(kernels, biases, act, out_act), variables, jit=True)
        for got, want in zip(fused(x), dense(x)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-3, atol=2e-3 * float(np.abs(want).max()))
        contenders.update(fused=fused, dense=dense, xla=xla)
        times = timing.interleaved_ms({name: (lambda f=f: [g.numpy() for g in f(x)])
                                       for name, f in contenders.items()}, a.rounds)
        row = {"net": label, "n": a.n, "rounds": a.rounds, "load_average": timing.load_average()}
        for name in times:
            row[f"{name}_ms"] = timing.median_wall_ms(times[name])
        row["speedup_vs_dense"] = timing.median_ratio(times["dense"], times["fused"])
        row["speedup_vs_xla"] = timing.median_ratio(times["xla"], times["fused"])
        if "fused_saved" in times:
            row["speedup_vs_fused_saved"] = timing.median_ratio(times["fused_saved"], times["fused"])
        row["fused_points_per_s"] = a.n / row["fused_ms"] * 1e3
        # Multiply-adds per weight and row: 1 forward, 3 forward + backward (x's gradient included).
        row["gflop"] = 2 * (1 if a.inference else 3) * a.n * sum(m * n for m, n in zip(dims[:-1], dims[1:])) / 1e9
        for name in times:
            row[f"{name}_gflop_per_s"] = row["gflop"] / row[f"{name}_ms"] * 1e3
        results.append(row)
        print(f"  {label:20s} {row['gflop']:.2f} GFLOP: fused {row['fused_gflop_per_s']:.0f}, Dense "
              f"{row['dense_gflop_per_s']:.0f}, XLA {row['xla_gflop_per_s']:.0f} GFLOP/s")
        print(f"  {label:20s} fused {row['fused_ms']:6.1f} ms ({row['fused_points_per_s'] / 1e6:.2f} M points/s) | "
              f"Dense {row['dense_ms']:6.1f} ms -> {row['speedup_vs_dense']:.2f}x | "
              f"Dense+XLA {row['xla_ms']:6.1f} ms -> {row['speedup_vs_xla']:.2f}x"
              + (f" | saved kept {row['fused_saved_ms']:6.1f} ms -> {row['speedup_vs_fused_saved']:.2f}x"
                 if "fused_saved_ms" in row else ""))
    timing.write_json(a.out, {"mode": mode, "library": os.path.relpath(metal_ops.__file__, ROOT),
                              "results": results})


if __name__ == "__main__":
    main()
