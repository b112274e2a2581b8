"""Rendering and evaluation: the model's colours along rays (the training step's renderer too),
whole views in chunks, PSNR and SSIM on held-out views, and the orbit's cameras.

A mixin of train.Trainer (Evaluation).
"""
import math

import numpy as np

from examples.nerf import datasets

# tf.image.ssim's smallest image side: its 11x11 Gaussian window.
SSIM_MIN_SIDE = 11


def psnr_from_mse(mse):
    return -10.0 * math.log10(max(float(mse), 1e-12))


class Evaluation:
    """render_rays / render_image / evaluate / ssim / orbit_poses."""

    def render_rays(self, o, d, training, use_grid, return_weights=False, background=None, sample_budget=None):
        """(rgb [R, 3], the renderer's output, the samples: t [R, S+1] (fixed) or RayMarchSamples (march),
        the number of samples marched (march: before pruning; fixed: R * S)). Training with the march
        sampler reads the published bitfield (occupancy_bits), so `use_grid` matters there only for
        evaluation. `sample_budget` (march): static shapes, metal_ops.ray_march_static's samples."""
        a = self.args
        jitter = training and not a.no_jitter
        background = self.background if background is None else background
        if self.marching:
            seed = self.tf.cast((self.step_var.read_value() + 7919 * a.seed) % 2147483647, self.tf.int32) \
                if jitter else 0
            out, samples, marched = self._hmodel.render_hash_marched(
                self.model, o, d, aabb=self.dataset.aabb, near=self.near, far=self.far, background=background,
                grid=self.grid, use_grid=use_grid, step_size=self.step_size, max_samples=a.max_samples,
                jitter=jitter, seed=seed, return_weights=return_weights, prune=a.prune,
                occupancy=self.occupancy_bits() if training else None, sample_budget=sample_budget,
                march_budget=None if not sample_budget else
                a.march_budget // self.num_replicas if a.march_budget else 2 * sample_budget)
            return out.rgb, out, samples, marched
        if a.model == "hash":
            out, t = self._hmodel.render_hash(
                self.model, o, d, aabb=self.aabb, near=self.near, far=self.far,
                background=background, num_samples=a.samples, grid=self.grid,
                use_grid=use_grid, num_candidates=a.candidates, occlusion_depth=a.occlusion_depth,
                jitter=jitter,
                return_weights=return_weights)
            return out.rgb, out, t, self.tf.shape(o)[0] * a.samples
        rgb, _, _ = self._baseline.render_baseline(
            self.model, o, d, near=self.near, far=self.far, background=background,
            num_samples=a.samples, jitter=jitter)
        return rgb, None, None, self.tf.shape(o)[0] * a.samples

    ORBIT_MAX_SIDE = 800  # orbit frames of larger captures are rendered at this size (longer side)

    def render_image(self, view, chunk=None):
        """A view (datasets.View, or a camera-to-world matrix with the first test view's intrinsics, scaled
        to at most ORBIT_MAX_SIDE pixels a side). `chunk` rays a call (default --eval-chunk); one trace
        serves every chunk and view, and the chunks are read back once per view."""
        tf = self.tf
        chunk = chunk or self.args.eval_chunk
        if not isinstance(view, datasets.View):
            ref = (self.dataset.splits["test"] or self.dataset.splits["train"])[0]
            f = min(1.0, self.ORBIT_MAX_SIDE / max(ref.height, ref.width))
            h, w = max(1, round(ref.height * f)), max(1, round(ref.width * f))
            view = datasets.View(np.zeros((h, w, 3), np.uint8), np.asarray(view, np.float64),
                                 ref.fx * w / ref.width, ref.fy * h / ref.height,
                                 ref.cx * w / ref.width, ref.cy * h / ref.height, distortion=ref.distortion)
        o, d = view.rays()
        o = o.astype(np.float32)
        d = d.astype(np.float32)
        ug = self.use_grid()
        if ug not in self._render_fn:
            spec = [tf.TensorSpec([None, 3], tf.float32)] * 2
            self._render_fn[ug] = tf.function(lambda o_, d_: self.render_rays(o_, d_, False, ug)[0],
                                              input_signature=spec, autograph=False)
        fn = self._render_fn[ug]
        parts = [fn(tf.constant(o[i:i + chunk]), tf.constant(d[i:i + chunk])) for i in range(0, len(o), chunk)]
        img = tf.concat(parts, 0).numpy() if len(parts) > 1 else parts[0].numpy()
        return np.clip(img.reshape(view.height, view.width, 3), 0.0, 1.0)

    def ground_truth(self, split):
        return [v.composite(self.eval_background) for v in self.dataset.splits[split]]

    def evaluate(self, split="val", max_views=None):
        """Mean per-image PSNR on held-out views; also returns the renders."""
        views = self.dataset.splits[split]
        if max_views:
            views = views[:max_views]
        renders, psnrs = [], []
        for view in views:
            img = self.render_image(view)
            renders.append(img)
            psnrs.append(psnr_from_mse(np.mean((img - view.composite(self.eval_background)) ** 2)))
        return float(np.mean(psnrs)) if psnrs else float("nan"), psnrs, renders

    def ssim_skipped(self, split):
        """Why SSIM is not computed on `split` (a view smaller than tf.image.ssim's window), or None."""
        small = [v for v in self.dataset.splits[split] if min(v.height, v.width) < SSIM_MIN_SIDE]
        if not small:
            return None
        return (f"a {split} view is {small[0].height}x{small[0].width} pixels, and tf.image.ssim needs at least "
                f"{SSIM_MIN_SIDE} a side")

    def ssim(self, renders, split):
        """Per-view SSIM (tf.image.ssim, max value 1) of renders against the split's ground truth."""
        tf = self.tf
        return [float(tf.image.ssim(tf.constant(img, tf.float32), tf.constant(gt, tf.float32), max_val=1.0))
                for img, gt in zip(renders, self.ground_truth(split))]

    def orbit_poses(self, n):
        """A circle of cameras around the box centre, at the training cameras' mean distance and height;
        where the training cameras leave a gap of more than 60 degrees of azimuth (a capture from one
        side, such as fox), the orbit sweeps their arc forth and back instead."""
        from examples.nerf import cameras

        if self.dataset.format == "procedural":
            return cameras.orbit_poses(n)
        centre = self.dataset.aabb.mean(axis=0)
        positions = np.stack([v.c2w[:3, 3] for v in self.dataset.splits["train"]]) - centre
        radius = float(np.mean(np.linalg.norm(positions, axis=1)))
        elevation = float(np.arcsin(np.clip(np.mean(positions[:, 2]) / max(radius, 1e-9), -0.99, 0.99)))
        around = np.sort(np.arctan2(positions[:, 1], positions[:, 0]))
        gaps = np.diff(np.concatenate([around, around[:1] + 2.0 * math.pi]))
        widest = int(np.argmax(gaps))
        start, span = around[(widest + 1) % len(around)], 2.0 * math.pi - gaps[widest]
        poses = []
        for i in range(n):
            az = 2.0 * math.pi * i / n if gaps[widest] <= math.pi / 3 else \
                start + span * 0.5 * (1.0 - math.cos(2.0 * math.pi * i / n))
            pos = centre + radius * np.array([math.cos(elevation) * math.cos(az), math.cos(elevation) * math.sin(az),
                                              math.sin(elevation)])
            poses.append(cameras.look_at(pos, target=centre))
        return poses
