"""CUDA figures for the RobustLoss kernels (through the C-ABI harness) against
a PyTorch composite on the same GPU, in one process: fwd+bwd (x, alpha, scale
gradients) vs the reference-style composite (every branch evaluated,
torch.where select), n = 2^22 and 2^24. Both sides are checked equal first.
Medians of CUDA-event timings (benchmarks/timing.py).
Usage (on the GPU machine, from the repository root, after `make cuda-harness`):
  python3 -m benchmarks.cuda.bench_robust_loss_cuda [--out PATH]  (default benchmarks/results/robust_loss_cuda.<gpu>.json)
"""
import ctypes

import numpy as np
import torch

from benchmarks.cuda.torch_harness import compare, lib, ptr as p, run_configs, stream


def robust_composite(x, alpha, scale):
    """Barron's reference lossfun, transcribed: all branches, then torch.where."""
    eps = torch.finfo(torch.float32).eps
    z = (x / scale) ** 2
    loss_two = 0.5 * z
    loss_zero = torch.log1p(torch.clamp(0.5 * z, max=3e37))
    loss_neginf = -torch.expm1(-0.5 * z)
    loss_posinf = torch.expm1(torch.clamp(0.5 * z, max=87.5))
    beta_safe = torch.clamp(torch.abs(alpha - 2.0), min=eps)
    alpha_safe = torch.where(alpha >= 0, torch.ones_like(alpha), -torch.ones_like(alpha)) * torch.clamp(
        torch.abs(alpha), min=eps)
    loss_otherwise = (beta_safe / alpha_safe) * (torch.pow(z / beta_safe + 1.0, 0.5 * alpha) - 1.0)
    return torch.where(alpha == -float("inf"), loss_neginf,
                       torch.where(alpha == 0, loss_zero,
                                   torch.where(alpha == 2, loss_two,
                                               torch.where(alpha == float("inf"), loss_posinf, loss_otherwise))))


def bench_robust(n, results):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", generator=gen)
    alpha = torch.tensor([1.3], device="cuda")
    scale = torch.tensor([0.5], device="cuda")
    out = torch.empty_like(x)
    g = torch.ones_like(x)
    dx = torch.empty_like(x)
    da = torch.empty(1, device="cuda")
    ds = torch.empty(1, device="cuda")
    n_c, one = ctypes.c_int64(n), ctypes.c_int64(1)

    def ours():
        lib.metal_ops_robust_loss_forward_float32(p(x), p(alpha), p(scale), p(out), n_c, one, 0, 0, stream())
        lib.metal_ops_robust_loss_backward_float32(p(g), p(x), p(alpha), p(scale), p(dx), p(da), p(ds), n_c, one,
                                                   0, 0, stream())

    xr = x.clone().requires_grad_(True)
    ar = alpha.clone().requires_grad_(True)
    sr = scale.clone().requires_grad_(True)

    def composite():
        loss = robust_composite(xr, ar, sr)
        return torch.autograd.grad(loss, [xr, ar, sr], grad_outputs=g)

    ours()
    gx, ga, gs = composite()
    torch.cuda.synchronize()
    ref = robust_composite(x, alpha, scale)
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-6), "forward differs"
    assert torch.allclose(dx, gx, rtol=1e-4, atol=1e-6), "dx differs"
    assert torch.allclose(da, ga, rtol=1e-3), (da, ga)
    assert torch.allclose(ds, gs, rtol=1e-3), (ds, gs)
    row = {"op": "robust_loss", "n": n, **compare(ours, composite)}
    row["ours_gelem_per_s"] = n / row["ours_ms"] / 1e6
    results.append(row)
    print(f"robust_loss fwd+bwd n=2^{int(np.log2(n))}: ours {row['ours_ms']:.3f} ms ({row['ours_gelem_per_s']:.1f} "
          f"Gelem/s), torch composite {row['composite_ms']:.3f} ms -> {row['speedup']:.1f}x; extra memory "
          f"{row['ours_peak_extra_mib']:.0f} vs {row['composite_peak_extra_mib']:.0f} MiB")


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "robust_loss_cuda.h100": ("RobustLoss CUDA against the PyTorch composite",
                              "Loss and gradients for x, alpha and scale.",
                              [("N", "n"), ("ours ms", "ours_ms"), ("composite ms", "composite_ms"), ("x", "speedup"),
                               ("composite extra MiB", "composite_peak_extra_mib")]),
}


def main():
    run_configs("robust_loss_cuda", [(2**22,), (2**24,)], bench_robust)


if __name__ == "__main__":
    main()
