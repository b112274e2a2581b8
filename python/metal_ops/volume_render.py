"""VolumeRender: fused emission-absorption volume rendering (kernels/volume_render/volume_render_op.cc).

Formulas (kernels/volume_render/volume_render.h), per ray with S samples:
    delta_i = t[i+1] - t[i],  T_i = exp(-sum_{j<i} sigma_j delta_j),
    w_i = T_i (1 - exp(-sigma_i delta_i)),
    rgb = sum w_i c_i + background (1 - opacity), depth = sum w_i (t[i] + t[i+1]) / 2,
    opacity = sum w_i.
See docs/VOLUME_RENDER.md.
"""
import collections

import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs
from metal_ops._loader import load_library

VolumeRenderOutput = collections.namedtuple("VolumeRenderOutput", ["rgb", "depth", "opacity", "weights"])


def volume_render(sigma, rgb, t, background=None, early_termination=1e-4, return_weights=False, validate=True,
                  name=None):
    """Renders R rays of S samples each in one fused op.

    Args:
      sigma: [R, S] densities (float32 or float64), >= 0. The other floating
        arguments have sigma's dtype (README "Dtypes"), and so do the outputs.
      rgb: [R, S, 3] sample colours.
      t: [R, S + 1] sample interval boundaries along each ray, non-decreasing
        (sample i covers [t[i], t[i+1]]; its depth is the midpoint).
      background: None (black, no gradient), [3] or [R, 3]: the colour behind
        the samples, composited with weight 1 - opacity.
      early_termination: samples from the first one whose transmittance is below
        this threshold on are skipped, in forward and backward (0 disables).
      return_weights: also return the per-sample weights [R, S].
      validate: raise for the first invalid ray (below). False: invalid rays
        render NaN and nothing is raised; on a CUDA GPU the op then reads
        nothing back, so the host does not wait for the kernel (for inputs
        that are valid by construction, in a training step).

    Returns:
      VolumeRenderOutput(rgb [R, 3], depth [R], opacity [R], weights [R, S] or None).
      Gradients flow to sigma, rgb and background from every output (weights
      included); t gets none.

    Raises:
      InvalidArgumentError: negative (or NaN) sigma, decreasing t (the message
        names the ray and sample; with validate), mismatched shapes (naming the argument) or
        early_termination outside [0, 1] (kernels/volume_render/volume_render.h;
        in a graph, shape errors and the attribute's are ValueErrors).
    """
    with tf.name_scope(name or "volume_render"):
        attrs = op_attrs("volume_render", "MetalOpsVolumeRender", early_termination=early_termination,
                         return_weights=return_weights, validate=validate)
        sigma, background, (rgb, t) = _float_inputs("volume_render", sigma, background, rgb=rgb, t=t)
        out_rgb, depth, opacity, weights = load_library().metal_ops_volume_render(sigma, rgb, t, background, **attrs)
        return VolumeRenderOutput(out_rgb, depth, opacity, weights if return_weights else None)


def _float_inputs(op, sigma, background, **others):
    """sigma (float32 or float64), background and the `others` (by name) as
    tensors of sigma's dtype (the dtype rule: a tensor or array of another
    dtype is a TypeError naming `op` and the argument). A None background is
    black [3]. Returns (sigma, background, [others in the order given])."""
    sigma = float_tensor(op, "sigma", sigma, (tf.float32, tf.float64))
    others = [float_tensor(op, n, x, (sigma.dtype,), like="sigma") for n, x in others.items()]
    background = (tf.zeros([3], dtype=sigma.dtype) if background is None
                  else float_tensor(op, "background", background, (sigma.dtype,), like="sigma"))
    return sigma, background, others


def _upstream(op, grad_rgb, grad_depth, grad_opacity, grad_weights):
    """The forward's outputs and their incoming gradients (zeros where None),
    the backward op's inputs after the forward's."""
    grads = [grad_rgb, grad_depth, grad_opacity, grad_weights]
    return list(op.outputs) + [tf.zeros_like(y) if g is None else g for g, y in zip(grads, op.outputs)]


@tf.RegisterGradient("MetalOpsVolumeRender")
def _volume_render_grad(op, grad_rgb, grad_depth, grad_opacity, grad_weights):
    """One backward op (suffix trick) from the inputs and per-ray outputs."""
    sigma, rgb, t, background = op.inputs
    grad_sigma, grad_rgb_samples, grad_background = load_library().metal_ops_volume_render_grad(
        sigma, rgb, t, background, *_upstream(op, grad_rgb, grad_depth, grad_opacity, grad_weights),
        early_termination=op.get_attr("early_termination"), validate=op.get_attr("validate"),
    )
    # No gradient for t (documented in docs/VOLUME_RENDER.md).
    return [grad_sigma, grad_rgb_samples, None, _background_grad(background, grad_background)]


def _background_grad(background, per_ray):
    """The per-ray background gradient [R, 3], summed over rays when the
    background was one colour [3] (shared with packed_volume_render)."""
    if background.shape.rank == 1:
        return tf.reduce_sum(per_ray, axis=0)
    if background.shape.rank is None:  # decided at run time
        return tf.cond(tf.equal(tf.rank(background), 1), lambda: tf.reduce_sum(per_ray, axis=0), lambda: per_ray)
    return per_ray


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest); validate=False: the
    launch without the check's read-back (CUDA)."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("volume_render"), []
    for r, s, weights, check in [(37, 19, True, True), (0, 16, True, True), (8, 0, False, True),
                                 (4096, 64, False, True), (4096, 64, True, False)]:
        out.append(selftest.case("volume_render", f"rays={r} samples={s} weights={weights}" + (
            "" if check else " validate=False"), np.float32, list(selftest.rays(rng, r, s)),
            lambda a, b, c, w=weights, v=check: volume_render(a, b, c, return_weights=w, validate=v), 1e-4,
            {"return_weights": weights, "validate": check}))
    return out
