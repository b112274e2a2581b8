"""A/B of two harness builds (libmetal_ops_cuda.so of different toolkits or
kernel versions) for the benchmarks on benchmarks/cuda/torch_harness.py
(RobustLoss, DistortionLoss, SHEncode), in one process: each benchmark's own
workload and checks with each library, its kernels timed with both in
interleaved rounds (CUDA events, medians; the ratio new/base per round,
then its median).

    python3 -m benchmarks.cuda.ab_torch_harness_libs --base build/libmetal_ops_cuda.so \\
        --new build/cuda12-harness/libmetal_ops_cuda.so [--rounds 9] [--out FILE]

The RobustLoss and DistortionLoss benchmarks' `ours()` call the harness
through their module's `lib`, looked up at each call: the A/B sets it to each
library in turn. SHEncode's cases bind the library's functions when they
start: each runs once per library, and the A/B times the `ours_*` variants of
both runs together.
"""
import argparse
import ctypes
import json
import statistics

import torch

from benchmarks import timing
from benchmarks.cuda import bench_distortion_loss_cuda, bench_robust_loss_cuda, bench_sh_encode_cuda

BENCHMARKS = [  # module, its bench function, its configurations (as its main())
    (bench_robust_loss_cuda, "bench_robust", [(2**22,), (2**24,)]),
    (bench_distortion_loss_cuda, "bench_distortion", [(4096, s) for s in (64, 128, 256)]),
]


# The bench rows' fields of its own comparison, which the A/B replaces.
DROPPED = ("composite_ms", "speedup", "ours_peak_extra_mib", "composite_peak_extra_mib", "ours_ms")


def skip(ours, composite, **_):
    return {"ours_ms": 1.0, "composite_ms": 1.0, "speedup": 1.0, "ours_peak_extra_mib": 0.0,
            "composite_peak_extra_mib": 0.0}


SH_CASES = [(n, dtype) for n in (1 << 20, 1 << 24) for dtype in (torch.float32, torch.float16)]


def sh_encode_ab(libs, rounds):
    """SHEncode forward and forward+backward of both libraries in the same rounds."""
    module, timed = bench_sh_encode_cuda, bench_sh_encode_cuda.interleaved
    rows = []
    for n, dtype in SH_CASES:
        fns = {}
        for name, lib in libs.items():  # the case's own checks with each library; its variants kept
            def keep(variants, rounds=0, warmup=0, name=name):
                fns.update({f"{name}_{k}": f for k, f in variants.items() if k.startswith("ours_")})
                return {k: [1.0] for k in variants}
            module.lib, module.interleaved = lib, keep
            module.case(n, dtype)
        module.interleaved = timed
        t = timed(fns, rounds=rounds * 3)
        row = {"op": "sh_encode", "n": n, "dtype": str(dtype).split(".")[-1]}
        for kind in ("ours_fwd", "ours_fwd_bwd"):
            row[f"{kind}_base_ms"] = statistics.median(t[f"base_{kind}"])
            row[f"{kind}_new_ms"] = statistics.median(t[f"new_{kind}"])
            row[f"{kind}_new_over_base"] = statistics.median(
                nw / b for nw, b in zip(t[f"new_{kind}"], t[f"base_{kind}"]))
        rows.append(row)
        print(f"A/B {row}")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the baseline harness library")
    parser.add_argument("--new", required=True, help="the harness library compared with it")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    libs = {"base": ctypes.CDLL(args.base), "new": ctypes.CDLL(args.new)}
    rows = []
    for module, bench_name, configs in BENCHMARKS:
        def ab(ours, composite, **_):
            ratios, times = [], {name: [] for name in libs}
            for _ in range(args.rounds):
                for name, lib in libs.items():
                    module.lib = lib
                    times[name].append(timing.cuda_median_ms(torch, ours, repeats=10, warmup=2))
                ratios.append(times["new"][-1] / times["base"][-1])
            module.lib = libs["new"]
            base, new = statistics.median(times["base"]), statistics.median(times["new"])
            # The bench's own row fields (ours = new), so that its print works.
            return {"ours_ms": new, "composite_ms": base, "speedup": base / new, "ours_peak_extra_mib": 0.0,
                    "composite_peak_extra_mib": 0.0, "base_ms": base, "new_ms": new,
                    "new_over_base": statistics.median(ratios)}

        for config in configs:
            # The benchmark's own checks with each library; the A/B on the second run.
            module.lib, module.compare = libs["base"], skip
            getattr(module, bench_name)(*config, [])
            module.lib, module.compare = libs["new"], ab
            results = []
            getattr(module, bench_name)(*config, results)
            row = {k: v for k, v in results[-1].items() if k not in DROPPED}
            rows.append(row)
            print(f"A/B {row}")
    rows += sh_encode_ab(libs, args.rounds)
    if args.out:
        timing.write_json(args.out, {"device": torch.cuda.get_device_name(0), "base": args.base, "new": args.new,
                                     "results": rows})
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
