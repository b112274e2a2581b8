"""The C-ABI CUDA harness (build/libmetal_ops_cuda.so, `make cuda-harness`)
called on PyTorch tensors, for the CUDA benchmarks."""
import ctypes
import os
import statistics

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# METAL_OPS_CUDA_HARNESS: another build of it (tests/cuda/harness.py).
lib = ctypes.CDLL(os.environ.get("METAL_OPS_CUDA_HARNESS") or os.path.join(ROOT, "build", "libmetal_ops_cuda.so"))


def ptr(t):
    """A tensor's device pointer."""
    return ctypes.c_void_p(t.data_ptr())


def stream():
    """PyTorch's current CUDA stream."""
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def interleaved(fns, rounds=30, warmup=5):
    """{name: [GPU ms per round]} (CUDA events), every variant once per round."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times[k].append(start.elapsed_time(end))
    return times


def speed_row(times, fields, kinds=("fwd", "fwd_bwd")):
    """A row of `fields` and, per kind, from interleaved()'s times of
    ours_<kind> and torch_<kind>: <kind>_ms and torch_<kind>_ms (medians),
    <kind>_speedup (the median of the per-round ratios torch / ours)."""
    row = dict(fields)
    for kind in kinds:
        ours, ref = times[f"ours_{kind}"], times[f"torch_{kind}"]
        row[f"{kind}_ms"] = statistics.median(ours)
        row[f"torch_{kind}_ms"] = statistics.median(ref)
        row[f"{kind}_speedup"] = statistics.median(r / o for r, o in zip(ref, ours))
    return row


def against_torch(ours_fwd, ours_fwd_bwd, torch_fwd, torch_fwd_bwd, y, dx, fields, timer=interleaved):
    """Ours against the PyTorch composite: ours_fwd_bwd() writes y and dx,
    checked against torch_fwd() and torch_fwd_bwd() (float32 within 1e-5,
    float16 2e-2, the gradient 10x that), then the four timed by `timer`;
    speed_row() of the times."""
    ours_fwd_bwd()
    torch.cuda.synchronize()
    tol = 1e-5 if y.dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y, torch_fwd(), rtol=tol, atol=tol)
    torch.testing.assert_close(dx, torch_fwd_bwd(), rtol=tol, atol=tol * 10)
    times = timer({"ours_fwd": ours_fwd, "torch_fwd": torch_fwd, "ours_fwd_bwd": ours_fwd_bwd,
                   "torch_fwd_bwd": torch_fwd_bwd})
    return speed_row(times, fields)


def result_path(benchmark):
    """benchmarks/results/<benchmark>.<gpu>.json for this process's GPU."""
    from benchmarks import timing

    return timing.result_path(benchmark, timing.device_label(torch.cuda.get_device_name(0)))


def run_configs(benchmark, configs, bench):
    """The main() of a CUDA benchmark over configurations: bench(*config,
    results) each, the rows written to --out (default
    benchmarks/results/<benchmark>.<gpu>.json)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None, help="the JSON (default benchmarks/results/<benchmark>.<gpu>.json)")
    args = parser.parse_args()
    results = []
    print(torch.cuda.get_device_name(0))
    for config in configs:
        bench(*config, results)
    write_results(args.out or result_path(benchmark), results)


def write_results(path, results):
    """The benchmark's rows, with the device's name, to path (benchmarks/timing.py)."""
    from benchmarks import timing

    timing.write_json(path, {"device": torch.cuda.get_device_name(0), "results": results})


def compare(ours, composite, composite_repeats=30, composite_warmup=5):
    """GPU time (median of CUDA-event timings) and peak extra memory of ours()
    and composite(), and the speedup, as a row's fields."""
    from benchmarks import timing

    t_ours = timing.cuda_median_ms(torch, ours)
    t_comp = timing.cuda_median_ms(torch, composite, repeats=composite_repeats, warmup=composite_warmup)
    return {"ours_ms": t_ours, "composite_ms": t_comp, "speedup": t_comp / t_ours,
            "ours_peak_extra_mib": timing.cuda_peak_extra_mib(torch, ours),
            "composite_peak_extra_mib": timing.cuda_peak_extra_mib(torch, composite)}
