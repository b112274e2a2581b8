"""CUDA figures for the DistortionLoss kernels (through the C-ABI harness)
against the O(S^2) PyTorch composite on the same GPU, in one process: fwd+bwd
(weights and t gradients), R = 4096, S in {64, 128, 256}; peak memory of each
from torch.cuda.max_memory_allocated. Both sides are checked equal first.
Medians of CUDA-event timings (benchmarks/timing.py).
Usage (on the GPU machine, from the repository root, after `make cuda-harness`):
  python3 -m benchmarks.cuda.bench_distortion_loss_cuda [--out PATH]  (default benchmarks/results/distortion_loss_cuda.<gpu>.json)
"""
import ctypes

import torch

from benchmarks.cuda.torch_harness import compare, lib, ptr as p, run_configs, stream


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
    row = {"op": "distortion_loss", "rays": rays, "samples": samples,
           **compare(ours, composite, composite_repeats=10, composite_warmup=2)}
    results.append(row)
    print(f"distortion_loss fwd+bwd R={rays} S={samples}: ours {row['ours_ms']:.3f} ms, O(S^2) torch "
          f"{row['composite_ms']:.3f} ms -> {row['speedup']:.0f}x; extra memory ours {row['ours_peak_extra_mib']:.1f} "
          f"MiB vs {row['composite_peak_extra_mib']:.0f} MiB")


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "distortion_loss_cuda.h100": ("DistortionLoss CUDA against the PyTorch composite",
                                  "Forward + backward, R = 4096 rays.",
                                  [("samples", "samples"), ("ours ms", "ours_ms"), ("composite ms", "composite_ms"),
                                   ("x", "speedup"), ("composite extra MiB", "composite_peak_extra_mib")]),
}


def main():
    run_configs("distortion_loss_cuda", [(4096, samples) for samples in (64, 128, 256)], bench_distortion)


if __name__ == "__main__":
    main()
