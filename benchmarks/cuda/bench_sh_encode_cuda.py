"""CUDA figures for SHEncode (through the C-ABI harness) against the PyTorch
composite a user would write (the NeRF sample's 16 elementwise ops, autograd
for the backward), on the same GPU, in one process.

N in {98,304 (the NeRF demo step), 2^20, 2^24} directions, degree 4, float32
and float16; forward, and forward + backward (gradient w.r.t. the
directions). Both sides are checked equal first. Medians of CUDA-event
timings, interleaved rounds; ratios and directions/s printed.
Usage (on the GPU machine, from the repository root, after `make cuda-harness`):
  python3 -m benchmarks.cuda.bench_sh_encode_cuda [--out PATH]
writes benchmarks/results/sh_encode_cuda.<gpu>.json (<gpu>: h100, ...) or --out.
"""
import argparse
import ctypes

import torch

from benchmarks.cuda.torch_harness import against_torch, interleaved, lib, ptr as p, result_path, stream, write_results


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "sh_encode_cuda.h100": ("SHEncode CUDA against the PyTorch composite",
                            "Degree 4.",
                            [("N", "n"), ("dtype", "dtype"), ("forward ms", "fwd_ms"), ("x PyTorch", "fwd_speedup"),
                             ("fwd + bwd ms", "fwd_bwd_ms"), ("fwd + bwd x PyTorch", "fwd_bwd_speedup")]),
}


def torch_sh(d):
    x, y, z = d.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    return torch.stack([
        torch.full_like(x, 0.28209479177387814), -0.48860251190291987 * y, 0.48860251190291987 * z,
        -0.48860251190291987 * x, 1.0925484305920792 * x * y, -1.0925484305920792 * y * z,
        0.94617469575755997 * zz - 0.31539156525251999, -1.0925484305920792 * x * z,
        0.54627421529603959 * (xx - yy), 0.59004358992664352 * y * (-3.0 * xx + yy), 2.8906114426405538 * x * y * z,
        0.45704579946446572 * y * (1.0 - 5.0 * zz), 0.3731763325901154 * z * (5.0 * zz - 3.0),
        0.45704579946446572 * x * (1.0 - 5.0 * zz), 1.4453057213202769 * z * (xx - yy),
        0.59004358992664352 * x * (-xx + 3.0 * yy)], dim=-1)


def case(n, dtype):
    name = "float16" if dtype == torch.float16 else "float32"
    fwd = getattr(lib, f"metal_ops_sh_encode_forward_{name}")
    bwd = getattr(lib, f"metal_ops_sh_encode_backward_{name}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    d = torch.nn.functional.normalize(torch.randn(n, 3, device="cuda", generator=gen), dim=-1).to(dtype)
    g = torch.randn(n, 16, device="cuda", generator=gen).to(dtype)
    values = torch.empty(n, 16, device="cuda", dtype=dtype)
    grad = torch.empty(n, 3, device="cuda", dtype=dtype)

    def ours_fwd():
        fwd(p(d), p(values), ctypes.c_int64(n), ctypes.c_int(4), stream())

    def ours_fwd_bwd():
        ours_fwd()
        bwd(p(g), p(d), p(grad), ctypes.c_int64(n), ctypes.c_int(4), stream())

    def torch_fwd():
        with torch.no_grad():
            return torch_sh(d)

    def torch_fwd_bwd():
        dd = d.detach().requires_grad_(True)
        torch_sh(dd).backward(g)
        return dd.grad

    # the module's `interleaved`, which benchmarks/cuda/ab_torch_harness_libs.py replaces
    row = against_torch(ours_fwd, ours_fwd_bwd, torch_fwd, torch_fwd_bwd, values, grad,
                        {"n": n, "dtype": name, "degree": 4}, timer=interleaved)
    for kind in ("fwd", "fwd_bwd"):
        row[f"{kind}_directions_per_s"] = n / (row[f"{kind}_ms"] * 1e-3)
    bytes_fwd = n * (3 + 16) * d.element_size()
    row["fwd_gb_per_s"] = bytes_fwd / (row["fwd_ms"] * 1e-3) / 1e9
    print(f"N={n:>9} {name}: fwd {row['fwd_ms']:.4f} ms ({row['fwd_speedup']:.1f}x torch, "
          f"{row['fwd_directions_per_s'] / 1e9:.2f} G dirs/s, {row['fwd_gb_per_s']:.0f} GB/s), "
          f"fwd+bwd {row['fwd_bwd_ms']:.4f} ms ({row['fwd_bwd_speedup']:.1f}x torch)")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = [case(n, dt) for n in (98_304, 1 << 20, 1 << 24) for dt in (torch.float32, torch.float16)]
    for row in rows:
        row["torch"] = torch.__version__
    write_results(args.out or result_path("sh_encode_cuda"), rows)


if __name__ == "__main__":
    main()
