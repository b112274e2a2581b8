"""HashEncode forward time per level-group size on the GPU, one process,
interleaved rounds: the harness's `levels_per_block` tuning knob (0 = the
library's default, 1 = one level per block: tiny-cuda-nn's level-major order).
Standard grid (benchmarks/cuda/bench_hash_encode_cuda.py), float16 and float32
tables, N = 2^20 and 2^22; prints ms per call and each time relative to the
default (< 1: faster than the default).

    make cuda-harness && python3 -m benchmarks.cuda.sweep_hash_encode_levels [--rounds 9]
"""
import argparse

import numpy as np

from benchmarks import timing
from benchmarks.cuda.bench_hash_encode_cuda import Runner, load


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=20, help="calls per timed run")
    args = ap.parse_args()
    cupy, lib = load()
    stream = cupy.cuda.get_current_stream()
    for dtype in (np.float16, np.float32):
        for n in (1 << 20, 1 << 22):
            r = Runner(cupy, lib, n, dtype)
            fns = {}
            for g in (0, 1, 2, 4, 8):
                def run(g=g):
                    for _ in range(args.reps):
                        r.forward(g)
                    stream.synchronize()
                fns[f"lpb{g}"] = run
            tm = timing.interleaved_ms(fns, args.rounds, warmup=2)
            ms = {k: round(timing.median_wall_ms(v) / args.reps, 4) for k, v in tm.items()}
            rel = {k: round(timing.median_ratio(tm[k], tm["lpb0"]), 3) for k in tm}
            print(np.dtype(dtype).name, n, "ms", ms, "time / default", rel, flush=True)


if __name__ == "__main__":
    main()
