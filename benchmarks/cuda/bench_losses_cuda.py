"""CUDA figures for the fused loss kernels (through the C-ABI harness) against
PyTorch composites on the same GPU, in one process.

- RobustLoss fwd+bwd (x, alpha, scale gradients) vs the reference-style
  composite (every branch evaluated, torch.where select), n = 2^22 and 2^24.
- DistortionLoss fwd+bwd (weights and t gradients) vs the O(S^2) composite,
  R = 4096, S in {64, 128, 256}; peak memory of each from
  torch.cuda.max_memory_allocated.

Both sides are checked equal first. Medians of CUDA-event timings.
Usage (on the GPU machine, after `make cuda-harness`):
  python3 benchmarks/cuda/bench_losses_cuda.py [--out benchmarks/results/losses_cuda.json]
"""
import argparse
import ctypes
import json
import os
import statistics

import numpy as np
import torch

from torch_harness import ROOT, lib, p, stream  # benchmarks/cuda is sys.path[0]


def timed(fn, repeats=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def peak_mib(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


# ---- RobustLoss --------------------------------------------------------------------
def robust_composite(x, alpha, scale):
    """Barron's reference lossfun, transcribed: all branches, then tf.where."""
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
    t_ours, t_comp = timed(ours), timed(composite)
    m_ours, m_comp = peak_mib(ours), peak_mib(composite)
    row = {"op": "robust_loss", "n": n, "ours_ms": t_ours, "composite_ms": t_comp, "speedup": t_comp / t_ours,
           "ours_gelem_per_s": n / t_ours / 1e6, "ours_peak_extra_mib": m_ours, "composite_peak_extra_mib": m_comp}
    results.append(row)
    print(f"robust_loss fwd+bwd n=2^{int(np.log2(n))}: ours {t_ours:.3f} ms ({row['ours_gelem_per_s']:.1f} Gelem/s), "
          f"torch composite {t_comp:.3f} ms -> {row['speedup']:.1f}x; extra memory {m_ours:.0f} vs {m_comp:.0f} MiB")


# ---- DistortionLoss ----------------------------------------------------------------
def distortion_composite(w, t):
    m = 0.5 * (t[:, 1:] + t[:, :-1])
    d = t[:, 1:] - t[:, :-1]
    bi = (w[:, :, None] * w[:, None, :] * torch.abs(m[:, :, None] - m[:, None, :])).sum(dim=(1, 2))
    return bi + (w * w * d).sum(-1) / 3


def bench_distortion(rays, samples, results):
    gen = torch.Generator(device="cuda").manual_seed(1)
    gaps = torch.rand(rays, samples + 1, device="cuda", generator=gen) + 0.1
    t = 2.0 + 4.0 * torch.cumsum(gaps, 1) / gaps.sum(1, keepdim=True)
    t = torch.cat([torch.full((rays, 1), 2.0, device="cuda"), t[:, :-1]], 1).contiguous()
    w = torch.rand(rays, samples, device="cuda", generator=gen)
    w = (w / w.sum(1, keepdim=True)).contiguous()
    loss = torch.empty(rays, device="cuda")
    g = torch.ones(rays, device="cuda")
    gw = torch.empty_like(w)
    gt = torch.empty_like(t)
    r_c, s_c = ctypes.c_int64(rays), ctypes.c_int64(samples)

    def ours():
        lib.metal_ops_distortion_loss_forward(p(w), p(t), p(loss), r_c, s_c, stream())
        lib.metal_ops_distortion_loss_backward(p(g), p(w), p(t), p(gw), p(gt), r_c, s_c, stream())

    wr = w.clone().requires_grad_(True)
    tr = t.clone().requires_grad_(True)

    def composite():
        return torch.autograd.grad(distortion_composite(wr, tr), [wr, tr], grad_outputs=g)

    ours()
    cw, ct = composite()
    torch.cuda.synchronize()
    assert torch.allclose(loss, distortion_composite(w, t), rtol=1e-4, atol=1e-6)
    assert torch.allclose(gw, cw, rtol=1e-3, atol=1e-5)
    assert torch.allclose(gt, ct, rtol=1e-3, atol=1e-4)
    t_ours, t_comp = timed(ours), timed(composite, repeats=10, warmup=2)
    m_ours, m_comp = peak_mib(ours), peak_mib(composite)
    row = {"op": "distortion_loss", "rays": rays, "samples": samples, "ours_ms": t_ours, "composite_ms": t_comp,
           "speedup": t_comp / t_ours, "ours_peak_extra_mib": m_ours, "composite_peak_extra_mib": m_comp}
    results.append(row)
    print(f"distortion_loss fwd+bwd R={rays} S={samples}: ours {t_ours:.3f} ms, O(S^2) torch {t_comp:.3f} ms -> "
          f"{row['speedup']:.0f}x; extra memory ours {m_ours:.1f} MiB vs {m_comp:.0f} MiB")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "losses_cuda.json"))
    args = parser.parse_args()
    results = []
    print(torch.cuda.get_device_name(0))
    for n in (2**22, 2**24):
        bench_robust(n, results)
    for samples in (64, 128, 256):
        bench_distortion(4096, samples, results)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "results": results}, f, indent=2)
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "losses_cuda.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "results": results}, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
