"""HashEncode on the CPU: our op vs the pure-TF composite a user would write.

Standard instant-NGP NeRF grid (D=3, L=16, F=2, log2 T=19, base 16, finest
2048). In one process, side by side: metal_ops.hash_encode in a tf.function,
the composite (tf.gather on the flat table, tf.bitwise hash, trilinear weights)
in a tf.function, and the same composite under tf.function(jit_compile=True).
The composite is checked equal to our op first. Every variant runs once per
round, rounds interleaved (--rounds); medians, and speedups as the median of
the per-round ratios (robust to the load drifting on a shared machine); ratios
and points/s printed; JSON written to benchmarks/results/hash_encode.cpu.json.
Also: float16-table figures, the cost of the input gradient, and 1- vs
2-thread scaling (subprocesses with intra-op parallelism 1 and 2).

Usage (from the repository root): python -m benchmarks.bench_hash_encode [--quick] [--rounds N] [--repeats N]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402

from benchmarks import timing  # noqa: E402
from metal_ops.hash_encode import hash_grid_offsets  # noqa: E402

D, L, F, LOG2_T, BASE, FINEST = 3, 16, 2, 19, 16, 2048
PER_LEVEL_SCALE = float(np.exp(np.log(FINEST / BASE) / (L - 1)))
GRID = dict(num_levels=L, log2_hashmap_size=LOG2_T, base_resolution=BASE, per_level_scale=PER_LEVEL_SCALE)
PRIMES = (1, 2654435761, 805459861, 3674653429)


# ---- the composite a user would write ---------------------------------------------------------


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "hash_encode.cpu": ("HashEncode on the CPU",
                        "Forward + backward against the same encoding as TF ops (graph) and under XLA.",
                        [("N", "name"), ("ours ms", "ours_forward_backward_ms"),
                         ("graph ms", "composite_forward_backward_ms"), ("XLA ms", "xla_forward_backward_ms"),
                         ("x graph", "speedup_vs_composite_forward_backward"),
                         ("x XLA", "speedup_vs_xla_forward_backward"), ("forward ms", "ours_forward_ms"),
                         ("forward x XLA", "speedup_vs_xla_forward")]),
}


def composite_levels():
    """Per-level constants the way a user computes them (float32 like tiny-cuda-nn)."""
    offsets = hash_grid_offsets(D, **GRID)
    log2_scale = np.float32(np.log2(np.float32(PER_LEVEL_SCALE)))
    levels = []
    for l in range(L):
        scale = np.float32(np.exp2(np.float32(l) * log2_scale) * np.float32(BASE) - np.float32(1))
        res = int(np.ceil(scale)) + 1
        entries = offsets[l + 1] - offsets[l]
        levels.append((scale, res, entries, offsets[l], res**D > entries))
    return levels


def make_composite(levels):
    mask32 = tf.constant(0xFFFFFFFF, tf.int64)

    def encode(x, table):
        feats = []
        for scale, res, entries, offset, hashed in levels:
            pos = x * scale + 0.5
            lower = tf.floor(pos)
            frac = pos - lower
            cell = tf.bitwise.bitwise_and(tf.cast(lower, tf.int64), mask32)
            acc = 0.0
            for corner in range(1 << D):
                weight = 1.0
                index = None
                for d in range(D):
                    bit = (corner >> d) & 1
                    c = cell[:, d] + bit
                    weight = weight * (frac[:, d] if bit else 1.0 - frac[:, d])
                    if hashed:
                        term = tf.bitwise.bitwise_and(c * PRIMES[d], mask32)
                        index = term if index is None else tf.bitwise.bitwise_xor(index, term)
                    else:
                        term = c * (res**d)
                        index = term if index is None else index + term
                rows = tf.math.floormod(tf.bitwise.bitwise_and(index, mask32), entries) + offset
                acc = acc + weight[:, None] * tf.gather(table, rows)
            feats.append(acc)
        return tf.concat(feats, axis=1)

    return encode


def ours_fns(x, table, dy, input_grad=False):
    @tf.function
    def fwd(x, table):
        return metal_ops.hash_encode(x, table, **GRID)

    @tf.function
    def fwd_bwd(x, table, dy):
        with tf.GradientTape() as tape:
            tape.watch(table)
            if input_grad:
                tape.watch(x)
            y = metal_ops.hash_encode(x, table, **GRID)
        # y is returned: otherwise the forward op, whose output the gradient
        # does not read, is pruned from the graph and only the backward runs.
        if input_grad:
            return [y] + tape.gradient(y, [table, x], output_gradients=dy)
        return [y, tape.gradient(y, table, output_gradients=dy)]

    return (lambda: fwd(x, table).numpy()), (lambda: tf.nest.map_structure(lambda t: t.numpy(), fwd_bwd(x, table, dy)))


def composite_fns(encode, x, table, dy, jit):
    fwd = tf.function(encode, jit_compile=jit)

    def grad(x, table, dy):
        with tf.GradientTape() as tape:
            tape.watch(table)
            y = encode(x, table)
        # tf.gather's gradient is IndexedSlices: densified, like our [P, F] result.
        return [y, tf.convert_to_tensor(tape.gradient(y, table, output_gradients=dy))]

    fwd_bwd = tf.function(grad, jit_compile=jit)
    return ((lambda: fwd(x, table).numpy()), (lambda: [t.numpy() for t in fwd_bwd(x, table, dy)]), fwd, fwd_bwd)


_THREAD_SCRIPT = """
import sys, json
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
import numpy as np
sys.argv = [sys.argv[0]]
from benchmarks import bench_hash_encode as b
from benchmarks import timing
n = 1 << 18
rng = np.random.default_rng(0)
x = tf.constant(rng.uniform(0, 1, (n, b.D)).astype(np.float32))
table = tf.constant(rng.uniform(-1e-4, 1e-4, (b.metal_ops.hash_grid_size(b.D, **b.GRID), b.F)).astype(np.float32))
dy = tf.constant(rng.normal(size=(n, b.L * b.F)).astype(np.float32))
fwd, fwd_bwd = b.ours_fns(x, table, dy)
f_wall, f_cpu = timing.median_ms(fwd, {repeats}, warmup=2)
fb_wall, fb_cpu = timing.median_ms(fwd_bwd, {repeats}, warmup=2)
print(json.dumps(dict(forward_ms=f_wall, forward_cpu_ms=f_cpu, forward_backward_ms=fb_wall, forward_backward_cpu_ms=fb_cpu)))
"""


def thread_scaling(repeats):
    out = {}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for threads in (1, 2):
        script = _THREAD_SCRIPT.format(repeats=repeats)
        proc = subprocess.run([sys.executable, "-c", script, str(threads)], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        out[threads] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N = 2^16 only, fewer repeats")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (every variant once each)")
    parser.add_argument("--repeats", type=int, default=7, help="calls per thread-scaling figure")
    parser.add_argument("--out", default=timing.result_path("hash_encode"))
    args = parser.parse_args()
    sizes = [1 << 16] if args.quick else [1 << 16, 1 << 18]
    rng = np.random.default_rng(0)
    rows = metal_ops.hash_grid_size(D, **GRID)
    table_np = rng.uniform(-1e-4, 1e-4, (rows, F)).astype(np.float32)
    table = tf.constant(table_np)
    table16 = tf.constant(table_np.astype(np.float16))
    encode = make_composite(composite_levels())
    results = dict(
        config=dict(D=D, L=L, F=F, log2_hashmap_size=LOG2_T, base_resolution=BASE, finest_resolution=FINEST,
                    parameters=rows * F),
        machine=dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count(),
                     tensorflow=tf.__version__, load_average_before=os.getloadavg()),
        runs={},
    )
    print(f"HashEncode CPU benchmark: standard grid ({rows * F:,} parameters), {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    for n in sizes:
        x = tf.constant(rng.uniform(0, 1, (n, D)).astype(np.float32))
        dy = tf.constant(rng.normal(size=(n, L * F)).astype(np.float32))
        dy16 = tf.cast(dy, tf.float16)
        ours_f, ours_fb = ours_fns(x, table, dy)
        comp_f, comp_fb, comp_fwd, comp_grad = composite_fns(encode, x, table, dy, jit=False)
        xla_f, xla_fb, xla_fwd, xla_grad = composite_fns(encode, x, table, dy, jit=True)
        # Verify equal before timing. The composite computes pos = x * scale +
        # 0.5 with two roundings (ours: one fma, as tiny-cuda-nn), so positions
        # differ by an ulp (~1e-4 of a cell at the finest level): allow 1e-3 of
        # the value scale. A wrong index or weight would be off by O(1) of it.
        ours_y = ours_f()
        np.testing.assert_allclose(comp_f(), ours_y, atol=1e-3 * np.abs(table_np).max(), rtol=0)
        np.testing.assert_allclose(xla_f(), ours_y, atol=1e-3 * np.abs(table_np).max(), rtol=0)
        ours_g = ours_fb()[1]
        np.testing.assert_allclose(comp_fb()[1], ours_g, atol=1e-3 * np.abs(ours_g).max(), rtol=0)
        np.testing.assert_allclose(xla_fb()[1], ours_g, atol=1e-3 * np.abs(ours_g).max(), rtol=0)
        ours_f16, ours_fb16 = ours_fns(x, table16, dy16)
        _, ours_fb_x = ours_fns(x, table, dy, input_grad=True)
        times = timing.interleaved_ms({
            "ours_forward": ours_f, "ours_forward_backward": ours_fb,
            "ours_fp16_table_forward": ours_f16, "ours_fp16_table_forward_backward": ours_fb16,
            "ours_forward_backward_with_input_grad": ours_fb_x,
            "composite_forward": comp_f, "composite_forward_backward": comp_fb,
            "xla_forward": xla_f, "xla_forward_backward": xla_fb,
        }, args.rounds)
        run = {"rounds": args.rounds}
        for key, samples in times.items():
            run[key + "_ms"] = statistics.median(w for w, _ in samples)
            run[key + "_cpu_ms"] = statistics.median(c for _, c in samples)
        # Speedups: the median over rounds of the round's ratio.
        for key in ("forward", "forward_backward"):
            for ref in ("composite", "xla"):
                for unit, idx in (("", 0), ("_cpu", 1)):
                    run[f"speedup_vs_{ref}_{key}{unit}"] = statistics.median(
                        r[idx] / o[idx] for r, o in zip(times[f"{ref}_{key}"], times[f"ours_{key}"]))
            run[f"ours_{key}_points_per_s"] = n / (run[f"ours_{key}_ms"] * 1e-3)
        run["input_grad_extra_ms"] = run["ours_forward_backward_with_input_grad_ms"] - run["ours_forward_backward_ms"]
        run["input_grad_extra_cpu_ms"] = (run["ours_forward_backward_with_input_grad_cpu_ms"]
                                          - run["ours_forward_backward_cpu_ms"])
        results["runs"][str(n)] = run
        print(f"\nN = {n:,}   (wall ms | process CPU ms, medians of {args.rounds} interleaved rounds; "
              f"speedups: median of the rounds' ratios)")
        print(f"  {'':30s} {'forward':>19s} {'fwd+bwd':>19s}")
        for label, key in (("metal_ops.hash_encode", "ours"), ("  float16 table", "ours_fp16_table"),
                           ("composite (graph)", "composite"), ("composite (XLA)", "xla")):
            print(f"  {label:30s} {run[key + '_forward_ms']:8.1f} | {run[key + '_forward_cpu_ms']:8.1f} "
                  f"{run[key + '_forward_backward_ms']:8.1f} | {run[key + '_forward_backward_cpu_ms']:8.1f}")
        print(f"  {'  + input gradient':30s} {'':19s} {run['ours_forward_backward_with_input_grad_ms']:8.1f} | "
              f"{run['ours_forward_backward_with_input_grad_cpu_ms']:8.1f}")
        for ref_name, ref_key in (("composite", "composite"), ("XLA", "xla")):
            print(f"  speedup vs {ref_name:9s}: forward {run[f'speedup_vs_{ref_key}_forward']:.1f}x wall "
                  f"({run[f'speedup_vs_{ref_key}_forward_cpu']:.1f}x CPU), fwd+bwd "
                  f"{run[f'speedup_vs_{ref_key}_forward_backward']:.1f}x wall "
                  f"({run[f'speedup_vs_{ref_key}_forward_backward_cpu']:.1f}x CPU)")
        print(f"  ours: {run['ours_forward_points_per_s']:.3g} points/s forward, "
              f"{run['ours_forward_backward_points_per_s']:.3g} points/s fwd+bwd (wall)")
        sys.stdout.flush()
    if not args.quick:
        scaling = thread_scaling(args.repeats)
        results["thread_scaling_n_262144"] = scaling
        s1, s2 = scaling[1], scaling[2]
        print("\nThreads (N = 262,144, intra-op parallelism):")
        for t in (1, 2):
            print(f"  {t} thread(s): forward {scaling[t]['forward_ms']:.1f} ms wall ({scaling[t]['forward_cpu_ms']:.1f} "
                  f"CPU), fwd+bwd {scaling[t]['forward_backward_ms']:.1f} ms wall "
                  f"({scaling[t]['forward_backward_cpu_ms']:.1f} CPU)")
        print(f"  2-thread speedup: forward {s1['forward_ms'] / s2['forward_ms']:.2f}x, "
              f"fwd+bwd {s1['forward_backward_ms'] / s2['forward_backward_ms']:.2f}x")
    results["machine"]["load_average_after"] = os.getloadavg()
    print()
    timing.write_json(args.out, results)


if __name__ == "__main__":
    main()
