"""What the table gradient's footprint in L2 costs the HashEncode backward.

The standard grid (benchmarks/cuda/bench_hash_encode_cuda.py) with the hash
table's rows per level T = 2^19, 2^20 and 2^21, the same points, N = 2^20 and
2^22, float32 and float16 tables. Every (point, level) sends the same number
of reduction requests whatever T is (an x-pair of corners is one or two
vector atomics on hashed and dense levels alike), so the backward's time per
point at larger T is the price of spreading those requests over a gradient
that no longer fits the H100's 50 MB L2 (one float32 level group of 4 levels:
16 MB at 2^19, 32 MB at 2^20, 64 MB at 2^21). A layout that keeps extra
copies of the gradient to merge more requests (docs/HASH_ENCODE_GPU.md,
"Against tiny-cuda-nn, and the floors") multiplies the footprint the same way. Interleaved
rounds, one process; prints ms per call and each time relative to T = 2^19.

    make cuda-harness && python3 -m benchmarks.cuda.sweep_hash_encode_table_size [--rounds 9] [--out PATH]

writes benchmarks/results/hash_encode_table_size.<gpu>.json (<gpu>: h100, ...) or --out.
"""
import argparse

import numpy as np

from benchmarks import timing
from benchmarks.cuda.bench_hash_encode_cuda import DIMS, GRID, Runner, load
from tests.reference import hash_encode as ref


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "hash_encode_table_size.h100": ("HashEncode CUDA: the table's size against L2",
                                    "The backward's time per call as the table grows past the H100's 50 MB L2 "
                                    "(relative to 2^19 rows per level).",
                                    [("dtype", "dtype"), ("N", "n"), ("pass", "case"),
                                     ("log2 T", "log2_hashmap_size"), ("ms", "ms"), ("time vs 2^19", "time_vs_base"),
                                     ("gradient MB", "gradient_mb")]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=10, help="calls per timed run")
    ap.add_argument("--log2t", default="19,20,21", help="rows per level, log2, comma-separated; the first is the base")
    ap.add_argument("--out", default=None, help="the JSON (default benchmarks/results/hash_encode_table_size.<gpu>.json)")
    args = ap.parse_args()
    cupy, lib = load()
    stream = cupy.cuda.get_current_stream()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sizes = [int(t) for t in args.log2t.split(",")]
    print(f"device: {device}; L2 {props['l2CacheSize'] / 2 ** 20:.0f} MiB; grid {GRID} with log2 T in {sizes}; "
          f"{args.rounds} interleaved rounds of {args.reps} calls", flush=True)
    results = {"device": device, "l2_bytes": int(props["l2CacheSize"]), "grid": GRID, "rounds": args.rounds,
               "cases": []}
    for dtype in (np.float32, np.float16):
        for n in (1 << 20, 1 << 22):
            runners, info = {}, {}
            for t in sizes:
                grid = dict(GRID, log2_hashmap_size=t)
                levels = ref.levels(DIMS, **grid)
                runners[t] = Runner(cupy, lib, n, dtype, grid=grid)
                info[t] = {"hashed_levels": sum(1 for lv in levels if lv.hashed),
                           "gradient_mb": runners[t].grad_table.nbytes / 1e6}
            for case in ("backward", "forward"):
                fns = {}
                for t, r in runners.items():
                    def run(r=r, case=case):
                        for _ in range(args.reps):
                            getattr(r, case)()
                        stream.synchronize()
                    fns[t] = run
                tm = timing.interleaved_ms(fns, args.rounds, warmup=2)
                base = sizes[0]
                for t in sizes:
                    ms = timing.median_wall_ms(tm[t]) / args.reps
                    rel = timing.median_ratio(tm[t], tm[base])
                    row = {"dtype": np.dtype(dtype).name, "n": n, "case": case, "log2_hashmap_size": t,
                           "ms": round(ms, 4), "time_vs_base": round(rel, 3), **info[t]}
                    results["cases"].append(row)
                    print(f"{row['dtype']:8s} N=2^{n.bit_length() - 1} {case:9s} log2 T={t}: {ms:.4f} ms "
                          f"x{rel:.3f} vs 2^{base} (hashed levels {info[t]['hashed_levels']}, "
                          f"gradient {info[t]['gradient_mb']:.0f} MB)", flush=True)
            del runners
            cupy.get_default_memory_pool().free_all_blocks()
    timing.write_json(args.out or timing.result_path("hash_encode_table_size", timing.device_label(device)), results)


if __name__ == "__main__":
    main()
