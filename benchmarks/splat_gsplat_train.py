"""Trains 3D Gaussian splatting with gsplat (PyTorch) on a scene that
`python -m benchmarks.splat_mic_gsplat prepare` wrote: the comparison's
other side (benchmarks/splat_mic_gsplat.py runs and scores both).

    python3 benchmarks/splat_gsplat_train.py --scene DIR/scene.npz --init DIR/init.npz --steps N --out DIR/gsplat

gsplat's examples/simple_trainer.py cannot run without its viewer and CLI
packages; this is a minimal trainer on gsplat's own `rasterization` and
`DefaultStrategy`. What it keeps from simple_trainer (v1.5.3) with its
defaults: the parameters as it stores them (means, log scales, quats,
opacity logits, sh0, shN of SH degree 3), one torch.optim.Adam per
parameter (eps 1e-15; learning rates: means 1.6e-4 x scene scale, scales
5e-3, quats 1e-3, opacities 5e-2, sh0 2.5e-3, shN 2.5e-3 / 20), the means'
ExponentialLR decaying to 0.01 over the run, one image a step, the loss
0.8 L1 + 0.2 (1 - SSIM) with SSIM's 11x11 window of sigma 1.5 and "valid"
padding, rasterization in classic mode with packed=False, near plane 0.01,
and DefaultStrategy's thresholds (grow_grad2d, grow_scale3d, prune_opa,
prune_scale3d).

What differs, so that both sides of the comparison see the same things:
the images, cameras, scene scale and initial Gaussians come from the .npz
files (this library's NeRF-synthetic loader, images composited on the
background, OpenCV cameras; the sample's random initialisation in the
scene's box, written by examples/splat/train.py's --write-init) instead of
simple_trainer's parsers and init; the renderer's background is that colour
(simple_trainer has no NeRF-synthetic path and renders on black); the
training views come in the sample's order (a permutation per epoch from
numpy's default_rng(seed)), not a torch DataLoader's; SSIM is plain PyTorch
(fused_ssim is not installed there), the same formula; the schedule is the
sample's for the run's length (examples/splat/recipe.py `Recipe.for_steps`:
refinement every 100 steps from step min(500, steps / 4) to half the run,
the opacity reset every max(1000, steps / 10), one SH band more every
min(1000, steps / 5) steps), where simple_trainer's `steps_scaler` would
also shorten the refinement interval; and the opacity reset is done here
at the strategy's reset steps, because DefaultStrategy 1.5.3's own
(`step % reset_every == 0 & step > 0`) never holds.

Writes <out>/metrics.json (train_seconds: the training loop alone, the GPU
synchronised; final Gaussian count; peak GPU memory, torch's
max_memory_allocated during training) as soon as training ends, then the
test views' renders <out>/test_NNN.png (uint8, as the sample writes them).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np



def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 benchmarks/splat_gsplat_train.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", required=True, help="scene.npz (splat_mic_gsplat prepare)")
    p.add_argument("--init", required=True, help="the initial Gaussians' .npz (examples/splat/train.py --write-init)")
    p.add_argument("--steps", type=int, required=True, help="training steps (one view each)")
    p.add_argument("--out", required=True, help="the folder of metrics.json and the test renders")
    p.add_argument("--seed", type=int, default=0, help="seed of the views' order (as the sample's --seed)")
    p.add_argument("--device", default="cuda", help="torch device")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error(f"--steps must be at least 1, got {a.steps}")
    return a


def ssim(img, ref):
    """SSIM of [B, H, W, 3] images: an 11x11 Gaussian window of sigma 1.5, 'valid' padding, K1 0.01, K2 0.03."""
    import torch
    import torch.nn.functional as F

    x, y = img.permute(0, 3, 1, 2), ref.permute(0, 3, 1, 2)
    g = torch.exp(-((torch.arange(11, dtype=x.dtype, device=x.device) - 5.0) ** 2) / (2 * 1.5 ** 2))
    g = g / g.sum()
    window = (g[:, None] * g[None, :]).expand(x.shape[1], 1, 11, 11).contiguous()
    blur = lambda t: F.conv2d(t, window, groups=x.shape[1])  # noqa: E731
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
    return s.mean()


def main(argv=None):
    import torch
    import torch.nn.functional as F
    from gsplat import rasterization
    from gsplat.strategy import DefaultStrategy

    a = parse_args(argv)
    log = (lambda *x: None) if a.quiet else print
    dev = torch.device(a.device)
    with np.load(a.scene) as f:
        scene = {k: f[k] for k in f.files}
    with np.load(a.init) as f:
        init = {k: f[k] for k in ("means", "scales", "quats", "opacities", "sh0", "shN")}
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(dev)  # noqa: E731
    targets = torch.from_numpy(scene["train_targets"])  # kept on the host; each step's view goes to the GPU
    viewmats, Ks = t(scene["train_viewmats"]), t(scene["train_Ks"])
    height, width = targets.shape[1:3]
    background = t(scene["background"])[None]
    scene_scale = float(scene["extent"])

    from gsplat.strategy.ops import reset_opa

    from examples.splat.recipe import Recipe

    recipe = Recipe.for_steps(a.steps)  # the sample's schedule for this many steps, on both sides
    sh_degree, sh_degree_interval = recipe.sh_degree, recipe.sh_degree_every
    strategy = DefaultStrategy(refine_start_iter=recipe.refine_start, refine_stop_iter=recipe.refine_stop,
                               reset_every=recipe.reset_every, refine_every=recipe.refine_every)
    params = torch.nn.ParameterDict({k: torch.nn.Parameter(t(v)) for k, v in init.items()})
    lrs = dict(means=1.6e-4 * scene_scale, scales=5e-3, quats=1e-3, opacities=5e-2, sh0=2.5e-3, shN=2.5e-3 / 20)
    optimizers = {k: torch.optim.Adam([{"params": params[k], "lr": lr, "name": k}], eps=1e-15)
                  for k, lr in lrs.items()}
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizers["means"], gamma=0.01 ** (1.0 / a.steps))
    strategy.check_sanity(params, optimizers)
    state = strategy.initialize_state(scene_scale=scene_scale)

    def render(viewmat, K, degree, width=width, height=height):
        colors = torch.cat([params["sh0"], params["shN"]], 1)  # [N, 16, 3]
        return rasterization(params["means"], params["quats"], torch.exp(params["scales"]),
                             torch.sigmoid(params["opacities"]), colors, viewmat, K, width, height,
                             near_plane=0.01, far_plane=1e10, sh_degree=degree, packed=False,
                             backgrounds=background, rasterize_mode="classic")

    log(f"gsplat: {targets.shape[0]} training views of {width}x{height}, {len(params['means'])} Gaussians, "
        f"{a.steps} steps; strategy {strategy}")
    rng = np.random.default_rng(a.seed)
    order, losses = [], []
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    for step in range(a.steps):
        if not order:
            order = list(rng.permutation(targets.shape[0]))
        i = int(order.pop())
        renders, _, info = render(viewmats[i:i + 1], Ks[i:i + 1], min(step // sh_degree_interval, sh_degree))
        strategy.step_pre_backward(params, optimizers, state, step, info)
        target = targets[i:i + 1].to(dev)
        loss = 0.8 * F.l1_loss(renders, target) + 0.2 * (1.0 - ssim(renders, target))
        loss.backward()
        for opt in optimizers.values():
            opt.step()
            opt.zero_grad(set_to_none=True)
        scheduler.step()
        strategy.step_post_backward(params, optimizers, state, step, info, packed=False)
        if 0 < step < strategy.refine_stop_iter and step % strategy.reset_every == 0:
            # DefaultStrategy's own reset (`step % reset_every == 0 & step > 0`) never fires in 1.5.3.
            reset_opa(params=params, optimizers=optimizers, state=state, value=strategy.prune_opa * 2.0)
        if step % max(1, a.steps // 20) == 0 or step == a.steps - 1:
            losses.append((step, loss.item()))
            log(f"step {step + 1}/{a.steps}: loss {losses[-1][1]:.4f}, {len(params['means'])} Gaussians, "
                f"{time.perf_counter() - started:.0f} s")
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None
    if not all(math.isfinite(v) for _, v in losses):
        raise FloatingPointError(f"gsplat: the loss is not finite: {losses}")

    import gsplat
    metrics = dict(name="gsplat", steps=a.steps, train_seconds=round(seconds, 2), gaussians=len(params["means"]),
                   peak_gpu_mib=peak, losses=losses, torch=torch.__version__, gsplat=gsplat.__version__,
                   gpu=torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
                   strategy=dict(refine_start_iter=strategy.refine_start_iter,
                                 refine_stop_iter=strategy.refine_stop_iter, reset_every=strategy.reset_every,
                                 refine_every=strategy.refine_every, sh_degree_interval=sh_degree_interval),
                   config=vars(a))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(f"gsplat: trained {a.steps} steps in {seconds:.1f} s: {len(params['means'])} Gaussians, peak "
          f"{peak if peak is None else round(peak)} MiB; wrote {os.path.join(a.out, 'metrics.json')}")

    import imageio.v2 as imageio
    test_viewmats, test_Ks = t(scene["test_viewmats"]), t(scene["test_Ks"])
    test_height, test_width = scene["test_targets"].shape[1:3]
    with torch.no_grad():
        for i in range(test_viewmats.shape[0]):
            image = render(test_viewmats[i:i + 1], test_Ks[i:i + 1], sh_degree, test_width, test_height)[0][0]
            img = np.clip(image.cpu().numpy(), 0.0, 1.0)
            imageio.imwrite(os.path.join(a.out, f"test_{i:03d}.png"), (img * 255.0 + 0.5).astype(np.uint8))
    print(f"gsplat: wrote {test_viewmats.shape[0]} test renders to {a.out}")
    return metrics


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
