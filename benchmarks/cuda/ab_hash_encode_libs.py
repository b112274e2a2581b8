"""Side-by-side comparison of HashEncode harness libraries (builds of
libmetal_ops_cuda.so from different kernel versions) in one process.

Standard grid, uniform random points, N = 2^20 by default. For each dtype the
same device buffers are used by every library; forward outputs are checked
bitwise equal to the first library's, then forward, backward (table gradient)
and forward + backward are timed in interleaved rounds (every library once per
round, CUDA events around a batch of back-to-back calls), reported as medians
over rounds and as ratios to the first library.

    python3 -m benchmarks.cuda.ab_hash_encode_libs base=build/ab/base.so new=build/libmetal_ops_cuda.so
"""
import argparse
import ctypes
import json
import os
import statistics

import numpy as np


from benchmarks import timing  # noqa: E402
from benchmarks.cuda.bench_hash_encode_cuda import Runner  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("libs", nargs="+", help="name=path[:levels_per_block] of a harness library (levels per "
                        "block 0 or absent = the library's default); the first is the baseline")
    parser.add_argument("--log2n", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=None, help="write the medians as JSON here")
    args = parser.parse_args()
    import cupy
    from tests.cuda.harness import bind_hash_encode

    libs, groups = {}, {}
    for spec in args.libs:
        name, path = spec.split("=", 1)
        path, _, g = path.partition(":")
        libs[name] = bind_hash_encode(ctypes.CDLL(os.path.abspath(path)))
        groups[name] = int(g or 0)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    n = 2 ** args.log2n
    batch = max(3, (2 ** 22 // n) * 3)
    results = {"device": device, "n": n, "rounds": args.rounds, "batch": batch, "libs": dict(
        s.split("=", 1) for s in args.libs), "medians_ms": {}}
    print(f"device: {device}; N = 2^{args.log2n}; {args.rounds} interleaved rounds of {batch} calls")
    for dtype in (np.float32, np.float16):
        r = Runner(cupy, next(iter(libs.values())), n, dtype)
        reference = None
        for name, lib in libs.items():
            r.lib = lib
            r.out.fill(0)
            r.forward(levels_per_block=groups[name])
            got = cupy.asnumpy(r.out)
            if reference is None:
                reference = got
            elif not np.array_equal(got.view(np.uint8), reference.view(np.uint8)):
                raise SystemExit(f"{name}: forward output differs from {next(iter(libs))} ({np.dtype(dtype).name})")
        cases = {"forward": lambda g: r.forward(levels_per_block=g),
                 "backward": lambda g: r.backward(levels_per_block=g),
                 "forward_backward": lambda g: (r.forward(levels_per_block=g), r.backward(levels_per_block=g))}
        samples = {(name, case): [] for name in libs for case in cases}
        for _ in range(args.rounds):
            for case, fn in cases.items():
                for name, lib in libs.items():
                    r.lib = lib
                    samples[(name, case)].append(
                        timing.cuda_median_ms(cupy, lambda: fn(groups[name]), 1, warmup=1, batch=batch))
        base = next(iter(libs))
        table = {}
        for case in cases:
            for name in libs:
                m = statistics.median(samples[(name, case)])
                table.setdefault(name, {})[case] = m
                ratio = m / statistics.median(samples[(base, case)])
                print(f"{np.dtype(dtype).name:8s} {case:17s} {name:14s} {m:.4f} ms  x{ratio:.3f} vs {base}")
        results["medians_ms"][np.dtype(dtype).name] = table
        del r
        cupy.get_default_memory_pool().free_all_blocks()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
