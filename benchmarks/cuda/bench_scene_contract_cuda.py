"""CUDA figures for SceneContract (through the C-ABI harness) against the
PyTorch formula a user would write (nerfstudio's SceneContraction:
torch.linalg.norm and torch.where, autograd for the backward), on the same
GPU, in one process.

N in {98,304 (the NeRF demo step), 2^20, 2^24} points, norm "l2" and "linf",
float32 and float16; forward, and forward + backward (gradient w.r.t. the
points). Both sides are checked equal first. Medians of CUDA-event timings,
interleaved rounds; ratios printed.
Usage (on the GPU machine, from the repository root, after `make cuda-harness`):
  python3 -m benchmarks.cuda.bench_scene_contract_cuda [--out PATH]
writes benchmarks/results/scene_contract_cuda.<gpu>.json (<gpu>: h100, ...) or --out.
"""
import ctypes

import torch

from benchmarks.cuda.torch_harness import against_torch, lib, ptr as p, run_configs, stream

NORMS = {"l2": 0, "linf": 1}  # kernels/scene_contract/scene_contract.h SceneContractNorm


def torch_contract(x, norm):
    r = torch.linalg.vector_norm(x, ord=2 if norm == "l2" else float("inf"), dim=-1, keepdim=True)
    safe = torch.clamp(r, min=1.0)
    return torch.where(r <= 1.0, x, (2.0 - 1.0 / safe) * x / safe)


def case(n, norm, dtype, results):
    name = "float16" if dtype == torch.float16 else "float32"
    fwd = getattr(lib, f"metal_ops_scene_contract_forward_{name}")
    bwd = getattr(lib, f"metal_ops_scene_contract_backward_{name}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    radius = torch.exp(torch.rand(n, 1, device="cuda", generator=gen) * 9 - 3)
    x = (torch.randn(n, 3, device="cuda", generator=gen) * radius).to(dtype)
    g = torch.randn(n, 3, device="cuda", generator=gen).to(dtype)
    y = torch.empty(n, 3, device="cuda", dtype=dtype)
    dx = torch.empty(n, 3, device="cuda", dtype=dtype)
    k = ctypes.c_int(NORMS[norm])

    def ours_fwd():
        fwd(p(x), p(y), ctypes.c_int64(n), k, stream())

    def ours_fwd_bwd():
        ours_fwd()
        bwd(p(g), p(x), p(dx), ctypes.c_int64(n), k, stream())

    def torch_fwd():
        with torch.no_grad():
            return torch_contract(x, norm)

    def torch_fwd_bwd():
        xx = x.detach().requires_grad_(True)
        torch_contract(xx, norm).backward(g)
        return xx.grad

    row = against_torch(ours_fwd, ours_fwd_bwd, torch_fwd, torch_fwd_bwd, y, dx,
                        {"n": n, "norm": norm, "dtype": name, "torch": torch.__version__})
    print(f"N={n:>9} {norm:4s} {name}: fwd {row['fwd_ms']:.4f} ms ({row['fwd_speedup']:.1f}x torch), "
          f"fwd+bwd {row['fwd_bwd_ms']:.4f} ms ({row['fwd_bwd_speedup']:.1f}x torch)")
    results.append(row)


if __name__ == "__main__":
    run_configs("scene_contract_cuda", [(n, norm, dt) for n in (98_304, 1 << 20, 1 << 24) for norm in NORMS
                                        for dt in (torch.float32, torch.float16)], case)
