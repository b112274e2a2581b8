"""Adaptive density control (gsplat's DefaultStrategy, the reference's rules).

Between refinements the view-space positional gradient's norm (in NDC units:
the pixel gradient times half the image size) is summed per Gaussian over the
views where it was visible. Every `refine_every` steps from `refine_start` to
`refine_stop`: Gaussians whose mean norm exceeds `grow_grad2d` are cloned
(small ones: largest scale <= grow_scale3d x extent) or split in two (large
ones: two samples of the Gaussian, scales / 1.6); then those below
`prune_opacity`, and after the first reset those larger than
`prune_scale3d` x extent, are pruned. Every `reset_every` steps the
opacities are clamped to twice `prune_opacity`.
"""
import math

import numpy as np
import tensorflow as tf

SPLIT_SCALE = 1.6


def _quat_to_matrix(q):
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).reshape(-1, 3, 3)


class DensityControl:
    def __init__(self, recipe, extent, seed=0):
        self.recipe, self.extent = recipe, float(extent)
        self.rng = np.random.default_rng(seed)
        self.grad2d = self.count = None  # variables [N]: the sums of the gradients' norms, the views counted

    def reset(self, n):
        """Zeroes the sums for n Gaussians (the variables are made on the first call)."""
        if self.grad2d is None:
            self.grad2d = tf.Variable(tf.zeros([n]), shape=tf.TensorShape([None]), trainable=False, name="grad2d")
            self.count = tf.Variable(tf.zeros([n]), shape=tf.TensorShape([None]), trainable=False, name="views")
        else:
            self.grad2d.assign(tf.zeros([n]))
            self.count.assign(tf.zeros([n]))

    def accumulate(self, grad_means2d, radii, width, height):
        """Adds one view's gradients [N, 2] (pixels) of the Gaussians it saw
        (radii [N, 2] > 0 on either axis: both are 0 for a culled one). TensorFlow ops on the sums' device, so a training step
        can run it inside its tf.function (after `reset`) with nothing read
        back; called eagerly it resets the sums when N changed."""
        g = tf.convert_to_tensor(grad_means2d, tf.float32)
        if tf.executing_eagerly() and (self.grad2d is None or self.grad2d.shape[0] != g.shape[0]):
            self.reset(g.shape[0])
        norm = tf.norm(g * [width / 2.0, height / 2.0], axis=-1)
        # Compared as floats: TensorFlow runs an int32 comparison in host memory, a copy from the GPU each step.
        seen = tf.reduce_max(tf.cast(tf.convert_to_tensor(radii), tf.float32), axis=-1) > 0.0
        self.grad2d.assign_add(tf.where(seen, norm, 0.0))
        self.count.assign_add(tf.cast(seen, tf.float32))

    def step(self, step, gaussians, optimizer):
        """Runs the control after training step `step` (1-based); returns what it did ({} if nothing)."""
        r, done = self.recipe, {}
        if r.refine_start < step <= r.refine_stop and step % r.refine_every == 0 and self.grad2d is not None:
            done.update(self.refine(step, gaussians, optimizer))
        if step % r.reset_every == 0 and step <= r.refine_stop:
            logit = math.log(2 * r.prune_opacity / (1 - 2 * r.prune_opacity))
            optimizer.reset("opacities", tf.minimum(gaussians.opacities, logit))
            done["reset"] = True
        return done

    def refine(self, step, gaussians, optimizer):
        r = self.recipe
        grads = self.grad2d.numpy().astype(np.float64) / np.maximum(self.count.numpy(), 1)
        scales = np.exp(gaussians.scales.numpy())
        high = grads > r.grow_grad2d
        small = scales.max(-1) <= r.grow_scale3d * self.extent
        clone, split = high & small, high & ~small
        values = {k: v.numpy() for k, v in gaussians.variables_by_name.items()}
        new = {k: [v[clone]] for k, v in values.items()}
        if split.any():
            # Two samples of each split Gaussian, at scales / 1.6; the originals are removed below.
            rot = _quat_to_matrix(values["quats"][split])
            s = scales[split]
            for _ in range(2):
                offset = np.einsum("nij,nj->ni", rot, s * self.rng.standard_normal(s.shape))
                for k, v in values.items():
                    new[k].append(v[split])
                new["means"][-1] = values["means"][split] + offset
                new["scales"][-1] = np.log(s / SPLIT_SCALE)
        optimizer.append({k: np.concatenate(v, 0) for k, v in new.items()})
        n_after = gaussians.count
        keep = np.ones(n_after, bool)
        keep[:split.size][split] = False
        opacity = 1.0 / (1.0 + np.exp(-gaussians.opacities.numpy()))
        keep &= opacity >= r.prune_opacity
        if step > r.reset_every:
            keep &= np.exp(gaussians.scales.numpy()).max(-1) <= r.prune_scale3d * self.extent
        pruned = int((~keep).sum()) - int((~keep[:split.size] & split).sum())
        optimizer.keep(keep)
        self.reset(gaussians.count)
        return dict(cloned=int(clone.sum()), split=int(split.sum()), pruned=pruned, count=gaussians.count)
