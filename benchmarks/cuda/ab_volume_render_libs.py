"""Side-by-side comparison of VolumeRender harness libraries (builds of
libmetal_ops_cuda.so from different kernel versions) in one process.

R rays x 64 samples (random and surface scenes, as bench_volume_render_cuda);
every library uses the same device buffers; forward outputs and gradients are
checked bitwise equal to the first library's, then forward and forward +
backward are timed in interleaved rounds (every library once per round, CUDA
events around a batch of back-to-back calls); the medians of the per-round
ratios to the first library are printed.

    python3 -m benchmarks.cuda.ab_volume_render_libs base=build/ab/base.so new=build/libmetal_ops_cuda.so
"""
import argparse
import ctypes
import json
import os
import statistics

from benchmarks import timing
from benchmarks.cuda.bench_volume_render_cuda import S, Ours
from tests.reference import volume_render as ref


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("libs", nargs="+", help="name=path of a harness library; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", default=None, help="write the medians and ratios as JSON here")
    args = parser.parse_args()
    import torch

    libs = {}
    for spec in args.libs:
        name, path = spec.split("=", 1)
        libs[name] = ctypes.CDLL(os.path.abspath(path))
    base = next(iter(libs))
    dev = torch.device("cuda")
    results = {"device": torch.cuda.get_device_name(0), "rounds": args.rounds, "libs": dict(
        s.split("=", 1) for s in args.libs), "runs": []}
    print(f"device: {results['device']}; {args.rounds} interleaved rounds")
    for scene in ("random", "surface"):
        for rays in (1 << 16, 1 << 18):
            sigma_np, rgb_np, t_np = ref.make_rays(rays, S, seed=1, surface=(scene == "surface"))
            sigma, rgb, t = (torch.tensor(x, device=dev) for x in (sigma_np, rgb_np, t_np))
            bg = torch.tensor([0.1, 0.2, 0.3], device=dev)
            runners = {name: Ours(torch, lib, sigma, rgb, t, bg) for name, lib in libs.items()}
            reference = None
            for name, r in runners.items():
                r.forward()
                r.backward()
                torch.cuda.synchronize()
                got = [x.cpu() for x in (r.out_rgb, r.depth, r.opacity, r.grad_sigma, r.grad_samples, r.grad_bg)]
                if reference is None:
                    reference = got
                elif not all(torch.equal(a, b) for a, b in zip(got, reference)):
                    raise SystemExit(f"{name}: outputs or gradients differ from {base} ({scene}, {rays} rays)")
            cases = {"forward": lambda r: r.forward(), "forward_backward": lambda r: (r.forward(), r.backward())}
            batch = max(3, (1 << 20) // rays)
            samples = {(name, case): [] for name in libs for case in cases}
            for _ in range(args.rounds):
                for case, fn in cases.items():
                    for name, r in runners.items():
                        samples[(name, case)].append(
                            timing.cuda_median_ms(torch, lambda: fn(r), 1, warmup=1, batch=batch))
            for case in cases:
                for name in libs:
                    ratios = [a / b for a, b in zip(samples[(name, case)], samples[(base, case)])]
                    row = {"scene": scene, "rays": rays, "case": case, "lib": name,
                           "median_ms": statistics.median(samples[(name, case)]),
                           "median_ratio_to_base": statistics.median(ratios)}
                    results["runs"].append(row)
                    print(f"{scene:8s} R={rays:7d} {case:17s} {name:8s} {row['median_ms']:.4f} ms  "
                          f"x{row['median_ratio_to_base']:.3f} vs {base}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
