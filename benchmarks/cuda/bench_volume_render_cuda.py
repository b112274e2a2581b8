"""VolumeRender CUDA kernels on a GPU, through the C-ABI harness.

Ours (one thread per ray, kernels/volume_render/volume_render.cu.cc) vs the composite a
PyTorch user writes (the Keras example's formula: 1 - exp, exclusive cumprod
of (1 - alpha + 1e-10), weighted sums) with autograd, same process, same
inputs, verified equal first. R rays x S = 64 samples, R in {4096, 2^16, 2^18};
float32. Times from CUDA events: each sample is a batch of back-to-back calls
divided by the batch size; median of the samples. Two scenes: "random" (no
sample reaches the threshold) and "surface" (an opaque sample per ray, so early
termination skips the rest; the composite has no early termination).

    make cuda-harness && python3 -m benchmarks.cuda.bench_volume_render_cuda [--out PATH] [--quick]
"""
import argparse
import ctypes
import os


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import timing  # noqa: E402
from tests.reference import volume_render as ref  # noqa: E402

S = 64
EPS = 1e-4


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "volume_render_cuda.h100": ("VolumeRender CUDA against the PyTorch composite",
                                "64 samples a ray.",
                                [("scene", "scene"), ("rays", "rays"), ("forward ms", "ours_forward_ms"),
                                 ("fwd + bwd ms", "ours_forward_backward_ms"), ("x forward", "speedup_forward"),
                                 ("x fwd + bwd", "speedup_forward_backward")]),
}


def ptr(x):
    return ctypes.c_void_p(x.data_ptr())


class Ours:
    def __init__(self, torch, lib, sigma, rgb, t, bg):
        self.torch, self.lib = torch, lib
        self.sigma, self.rgb, self.t, self.bg = sigma, rgb, t, bg
        R = sigma.shape[0]
        self.R = R
        dev, dt = sigma.device, sigma.dtype
        self.out_rgb = torch.empty((R, 3), device=dev, dtype=dt)
        self.depth = torch.empty((R,), device=dev, dtype=dt)
        self.opacity = torch.empty((R,), device=dev, dtype=dt)
        self.g_rgb = torch.ones((R, 3), device=dev, dtype=dt)
        self.g_depth = torch.ones((R,), device=dev, dtype=dt)
        self.g_opacity = torch.ones((R,), device=dev, dtype=dt)
        self.grad_sigma = torch.empty_like(sigma)
        self.grad_samples = torch.empty_like(rgb)
        self.grad_bg = torch.empty((R, 3), device=dev, dtype=dt)

    def stream(self):
        return ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)

    def forward(self, eps=EPS):
        err = self.lib.metal_ops_volume_render_forward_float32(
            ptr(self.sigma), ptr(self.rgb), ptr(self.t), ptr(self.bg), ctypes.c_int32(0), ctypes.c_int64(self.R),
            ctypes.c_int64(S), ctypes.c_float(eps), ptr(self.out_rgb), ptr(self.depth), ptr(self.opacity),
            ctypes.c_void_p(0), ctypes.c_void_p(0), self.stream())
        assert err == 0, err

    def backward(self, eps=EPS):
        err = self.lib.metal_ops_volume_render_backward_float32(
            ptr(self.sigma), ptr(self.rgb), ptr(self.t), ptr(self.bg), ctypes.c_int32(0), ctypes.c_int64(self.R),
            ctypes.c_int64(S), ctypes.c_float(eps), ptr(self.out_rgb), ptr(self.depth), ptr(self.opacity),
            ctypes.c_void_p(0), ptr(self.g_rgb), ptr(self.g_depth), ptr(self.g_opacity), ctypes.c_void_p(0),
            ptr(self.grad_sigma), ptr(self.grad_samples), ptr(self.grad_bg), self.stream())
        assert err == 0, err


def composite(torch, sigma, rgb, t, bg):
    delta = t[:, 1:] - t[:, :-1]
    alpha = 1.0 - torch.exp(-sigma * delta)
    trans = torch.cumprod(1.0 - alpha + 1e-10, dim=-1)
    trans = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], dim=-1)  # exclusive
    w = alpha * trans
    opacity = w.sum(-1)
    out = (w[..., None] * rgb).sum(-2) + bg * (1.0 - opacity)[:, None]
    depth = (w * 0.5 * (t[:, 1:] + t[:, :-1])).sum(-1)
    return out, depth, opacity


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None, help="the JSON (default benchmarks/results/volume_render_cuda.<gpu>.json)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import torch

    lib = ctypes.CDLL(os.path.join(ROOT, "build", "libmetal_ops_cuda.so"))
    dev = torch.device("cuda")
    batch, samples = (5, 5) if args.quick else (20, 15)
    results = {"device": torch.cuda.get_device_name(0), "samples_per_ray": S, "early_termination": EPS,
               "method": "CUDA events, batch of back-to-back calls / batch size, median", "runs": []}
    sizes = [4096, 1 << 16] if args.quick else [4096, 1 << 16, 1 << 18]
    for scene in ["random", "surface"]:
        for R in sizes:
            sigma_np, rgb_np, t_np = ref.make_rays(R, S, seed=1, surface=(scene == "surface"))
            sigma = torch.tensor(sigma_np, device=dev)
            rgb = torch.tensor(rgb_np, device=dev)
            t = torch.tensor(t_np, device=dev)
            bg = torch.tensor([0.1, 0.2, 0.3], device=dev)
            ours = Ours(torch, lib, sigma, rgb, t, bg)

            # Verified equal first (without early termination, which the composite lacks).
            ours.forward(eps=0.0)
            c_rgb, c_depth, c_opacity = composite(torch, sigma, rgb, t, bg)
            torch.cuda.synchronize()
            for a, b in ((ours.out_rgb, c_rgb), (ours.depth, c_depth), (ours.opacity, c_opacity)):
                diff = (a - b).abs().max().item()
                assert diff < 1e-4, f"ours and composite differ by {diff}"
            if scene == "random":  # (opaque samples make the composite's cumprod gradient ill-conditioned)
                sig_a = sigma.clone().requires_grad_(True)
                rgb_a = rgb.clone().requires_grad_(True)
                o = composite(torch, sig_a, rgb_a, t, bg)
                (o[0].sum() + o[1].sum() + o[2].sum()).backward()
                ours.backward(eps=0.0)
                torch.cuda.synchronize()
                scale = max(1.0, sig_a.grad.abs().max().item())
                gdiff = (ours.grad_sigma - sig_a.grad).abs().max().item() / scale
                assert gdiff < 1e-3, f"sigma gradients differ by {gdiff} (relative)"
                cdiff = (ours.grad_samples - rgb_a.grad).abs().max().item()
                assert cdiff < 1e-4, f"colour gradients differ by {cdiff}"

            def comp_fwd():
                with torch.no_grad():
                    composite(torch, sigma, rgb, t, bg)

            def comp_fwd_bwd():
                s = sigma.detach().requires_grad_(True)
                c = rgb.detach().requires_grad_(True)
                o = composite(torch, s, c, t, bg)
                torch.autograd.backward([o[0], o[1], o[2]], [ours.g_rgb, ours.g_depth, ours.g_opacity])

            def ours_fwd_bwd():
                ours.forward()
                ours.backward()

            def gpu_ms(fn):
                return timing.cuda_median_ms(torch, fn, samples, warmup=1, batch=batch)

            row = {"scene": scene, "rays": R, "ours_forward_ms": gpu_ms(ours.forward),
                   "ours_forward_backward_ms": gpu_ms(ours_fwd_bwd),
                   "ours_forward_backward_no_early_termination_ms": gpu_ms(
                       lambda: (ours.forward(0.0), ours.backward(0.0))),
                   "composite_forward_ms": gpu_ms(comp_fwd), "composite_forward_backward_ms": gpu_ms(comp_fwd_bwd)}
            row["speedup_forward"] = row["composite_forward_ms"] / row["ours_forward_ms"]
            row["speedup_forward_backward"] = row["composite_forward_backward_ms"] / row["ours_forward_backward_ms"]
            row["ours_samples_per_s_forward_backward"] = R * S / (row["ours_forward_backward_ms"] * 1e-3)
            results["runs"].append(row)
            print(f"{scene:8s} R={R:7d}: ours fwd {row['ours_forward_ms']:.4f} ms, fwd+bwd "
                  f"{row['ours_forward_backward_ms']:.4f} ms (no early term. "
                  f"{row['ours_forward_backward_no_early_termination_ms']:.4f}) | composite fwd "
                  f"{row['composite_forward_ms']:.4f} ms, fwd+bwd {row['composite_forward_backward_ms']:.4f} ms | "
                  f"speedup fwd {row['speedup_forward']:.1f}x, fwd+bwd {row['speedup_forward_backward']:.1f}x, "
                  f"{row['ours_samples_per_s_forward_backward'] / 1e9:.2f} G samples/s", flush=True)
    timing.write_json(args.out or timing.result_path("volume_render_cuda", timing.device_label(results["device"])),
                      results)


if __name__ == "__main__":
    main()
