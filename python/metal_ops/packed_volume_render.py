"""PackedVolumeRender: VolumeRender over packed samples
(kernels/packed_volume_render/packed_volume_render_op.cc).

Samples are packed as `ray_march` returns them: N samples ordered by ray,
sample i covering [t_starts[i], t_ends[i]], ray r owning the samples
[ray_offsets[r], ray_offsets[r] + ray_counts[r]). Per ray, the formulas are
VolumeRender's (kernels/volume_render/volume_render.h):
    delta_i = t_end_i - t_start_i,  T_i = exp(-sum_{j<i} sigma_j delta_j),
    w_i = T_i (1 - exp(-sigma_i delta_i)),
    rgb = sum w_i c_i + background (1 - opacity),
    depth = sum w_i (t_start_i + t_end_i) / 2,  opacity = sum w_i.
See docs/PACKED_VOLUME_RENDER.md.
"""
import collections

import tensorflow as tf

from metal_ops._args import op_attrs
from metal_ops._loader import load_library
from metal_ops.volume_render import _background_grad, _float_inputs, _upstream

PackedVolumeRenderOutput = collections.namedtuple("PackedVolumeRenderOutput", ["rgb", "depth", "opacity", "weights"])


def packed_volume_render(sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background=None,
                         early_termination=1e-4, return_weights=False, num_samples=None, validate=True,
                         name=None):
    """Renders R rays over N packed samples in one fused op.

    Args:
      sigma: [N] densities (float32 or float64), >= 0. The other floating
        arguments have sigma's dtype (README "Dtypes"), and so do the outputs.
      rgb: [N, 3] sample colours.
      t_starts, t_ends: [N] each sample's interval along its ray (t_end >= t_start;
        its depth is the midpoint).
      ray_offsets, ray_counts: [R] int32, as `ray_march` returns them: the
        offsets are the exclusive prefix sum of the counts, which sum to N.
      background: None (black, no gradient), [3] or [R, 3]: the colour behind
        the samples, composited with weight 1 - opacity.
      early_termination: along each ray, samples from the first one whose
        transmittance is below this threshold on are skipped, in forward and
        backward (0 disables).
      return_weights: also return the per-sample weights [N] (for
        `packed_distortion_loss`).
      num_samples: for samples padded to a static size, as `ray_march_static`
        returns them (its `num_samples`, an int32 scalar): the counts then sum
        to num_samples, and samples [num_samples, N) are padding, whatever
        their values: they render nothing, their weights are 0 and their
        gradients 0 (they become zero-length samples of zero density on rays
        of their own, at most 64 samples each, whose results are dropped).
      validate: raise for the first invalid ray (below). False: invalid rays
        render NaN and nothing is raised; on a CUDA GPU the op then reads
        nothing back, so the host does not wait for the kernel (for layouts
        that `ray_march` / `ray_march_static` returned, in a training step).

    Returns:
      PackedVolumeRenderOutput(rgb [R, 3], depth [R], opacity [R], weights [N] or None).
      Gradients flow to sigma, rgb and background from every output (weights
      included); t_starts, t_ends and the layout get none.

    Raises:
      InvalidArgumentError: with validate, a layout that breaks the rule above
        (naming 'ray_offsets' or 'ray_counts' and the ray), negative (or NaN)
        sigma, t_end < t_start (naming the sample and ray); mismatched shapes,
        early_termination outside [0, 1] (kernels/packed_volume_render/packed_volume_render.h;
        in a graph, shape errors and the attribute's are ValueErrors).
      TypeError: ray_offsets / ray_counts not int32.
    """
    with tf.name_scope(name or "packed_volume_render"):
        attrs = op_attrs("packed_volume_render", "MetalOpsPackedVolumeRender", early_termination=early_termination,
                         return_weights=return_weights, validate=validate)
        validate = attrs["validate"]
        sigma, background, (rgb, t_starts, t_ends) = _float_inputs(
            "packed_volume_render", sigma, background, rgb=rgb, t_starts=t_starts, t_ends=t_ends)
        ray_offsets = _int32(ray_offsets, "ray_offsets")
        ray_counts = _int32(ray_counts, "ray_counts")
        rays = None
        if num_samples is not None:
            rays = tf.shape(ray_counts)[0]
            sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background = _padding_rays(
                sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background, _int32(num_samples, "num_samples"),
                validate)
        out_rgb, depth, opacity, weights = load_library().metal_ops_packed_volume_render(
            sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background,
            **attrs)
        if rays is not None:  # the padding's rays
            out_rgb, depth, opacity = out_rgb[:rays], depth[:rays], opacity[:rays]
        return PackedVolumeRenderOutput(out_rgb, depth, opacity, weights if return_weights else None)


# Samples a padding ray takes at most. The kernels render a ray in one thread,
# so padding on one ray (as ray_march_static leaves it, on the last) would be
# one thread's loop over all of it: milliseconds at 2^18 samples.
_PADDING_RAY_SAMPLES = 64


def _padding_rays(sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background, num_samples, validate):
    """The padding [num_samples, N) as [0, 0] intervals of zero density and colour on rays of their own.

    ceil(N / 64) rays follow the R given ones (a static count where N is), ray j taking samples
    [num_samples + 64 j, num_samples + 64 (j + 1)) within N, so the layout rule holds; the
    caller drops their outputs. A per-ray background gets them as zero rows. With `validate`,
    asserts that the counts sum to num_samples <= N (without, the op's NaNs tell).
    """
    n_static = sigma.shape[0]
    n = tf.shape(sigma)[0] if n_static is None else n_static
    checks = [
        tf.debugging.assert_equal(tf.reduce_sum(ray_counts), num_samples,
                                  message="packed_volume_render: 'ray_counts' must sum to 'num_samples'"),
        tf.debugging.assert_less_equal(num_samples, n, message="packed_volume_render: 'num_samples' must be at "
                                                               "most N, the length of 'sigma'"),
    ] if validate else []
    with tf.control_dependencies(checks):
        valid = tf.range(n) < num_samples
    sigma = tf.where(valid, sigma, tf.zeros_like(sigma))
    rgb = tf.where(valid[:, None], rgb, tf.zeros_like(rgb))
    t_starts = tf.where(valid, t_starts, tf.zeros_like(t_starts))
    t_ends = tf.where(valid, t_ends, tf.zeros_like(t_ends))
    padding_rays = (n + _PADDING_RAY_SAMPLES - 1) // _PADDING_RAY_SAMPLES
    starts = tf.minimum(num_samples + _PADDING_RAY_SAMPLES * tf.range(padding_rays), n)
    ends = tf.minimum(starts + _PADDING_RAY_SAMPLES, n)
    ray_offsets = tf.concat([ray_offsets, starts], 0)
    ray_counts = tf.concat([ray_counts, ends - starts], 0)
    if background.shape.rank != 1:  # [R, 3] (or a rank known at run time only)
        def per_ray():
            return tf.concat([background, tf.zeros([padding_rays, 3], background.dtype)], 0)
        background = per_ray() if background.shape.rank == 2 else tf.cond(
            tf.equal(tf.rank(background), 2), per_ray, lambda: background)
    return sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background


def _int32(x, name):
    dtype = getattr(x, "dtype", None)  # tensors and arrays: no silent casts of other integer widths
    if dtype is not None and tf.as_dtype(dtype) != tf.int32:
        raise TypeError(f"packed_volume_render: '{name}' must be int32 (as ray_march returns it), "
                        f"got {tf.as_dtype(dtype).name}")
    return tf.convert_to_tensor(x, dtype=tf.int32, name=name)


@tf.RegisterGradient("MetalOpsPackedVolumeRender")
def _packed_volume_render_grad(op, grad_rgb, grad_depth, grad_opacity, grad_weights):
    """One backward op (VolumeRender's suffix trick per ray)."""
    sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background = op.inputs
    grad_sigma, grad_rgb_samples, grad_background = load_library().metal_ops_packed_volume_render_grad(
        sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background,
        *_upstream(op, grad_rgb, grad_depth, grad_opacity, grad_weights),
        early_termination=op.get_attr("early_termination"), validate=op.get_attr("validate"))
    # No gradient for the intervals or the layout (docs/PACKED_VOLUME_RENDER.md).
    return [grad_sigma, grad_rgb_samples, None, None, None, None, _background_grad(background, grad_background)]


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): random counts per
    ray, each ray's samples sorted as ray_march gives them."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("packed_volume_render"), []
    for r, mean, weights, check in [(37, 9, True, True), (0, 4, True, True), (6, 0, False, True),
                                    (4096, 24, False, True), (4096, 24, True, False)]:
        counts = rng.integers(0, 2 * mean + 1, r).astype(np.int32)
        offsets = (np.cumsum(counts) - counts).astype(np.int32)
        n = int(counts.sum())
        sigma = rng.uniform(0, 5, n).astype(np.float32)
        rgb = rng.uniform(0, 1, (n, 3)).astype(np.float32)
        t_starts = rng.uniform(2, 6, n).astype(np.float32)
        for o, c in zip(offsets, counts):
            t_starts[o:o + c] = np.sort(t_starts[o:o + c])
        t_ends = (t_starts + rng.uniform(0, 0.05, n)).astype(np.float32)
        out.append(selftest.case("packed_volume_render", f"rays={r} samples={n} weights={weights}" + (
            "" if check else " validate=False"), np.float32, [sigma, rgb, t_starts, t_ends, offsets, counts],
            lambda a, b, c, d, e, f, w=weights, v=check: packed_volume_render(a, b, c, d, e, f, return_weights=w,
                                                                              validate=v), 1e-4,
            {"return_weights": weights, "validate": check}))
    return out
