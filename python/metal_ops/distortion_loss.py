"""mip-NeRF 360's distortion loss in O(S) per ray (kernels/distortion_loss/distortion_loss_op.cc).

The formulas live in kernels/distortion_loss/distortion_loss.h (prefix-sum form of
DVGOv2) and are shared by the CPU, CUDA and Metal kernels.
"""
import tensorflow as tf

from metal_ops._args import float_tensor
from metal_ops._loader import load_library


def distortion_loss(weights, t, name=None):
    """Per-ray distortion loss sum_{i,j} w_i w_j |m_i - m_j| + 1/3 sum_i w_i^2 d_i.

    Args:
      weights: [R, S] float32 rendering weights.
      t: [R, S + 1] float32 interval edges, non-decreasing along each ray
        (m_i = (t_i + t_{i+1}) / 2, d_i = t_{i+1} - t_i).

    Returns [R] float32. O(R*S) time and memory, forward and backward.
    Differentiable w.r.t. weights and t. Raises InvalidArgumentError naming the
    first ray whose t decreases (CPU kernel), and for mismatched shapes.
    """
    with tf.name_scope(name or "distortion_loss"):
        weights = float_tensor("distortion_loss", "weights", weights)
        t = float_tensor("distortion_loss", "t", t)
        return load_library().metal_ops_distortion_loss(weights, t)


@tf.RegisterGradient("MetalOpsDistortionLoss")
def _distortion_loss_grad(op, grad):
    weights, t = op.inputs
    grad_weights, grad_t = load_library().metal_ops_distortion_loss_grad(grad, weights, t)
    return [grad_weights, grad_t]


def packed_distortion_loss(weights, t_starts, t_ends, ray_offsets, ray_counts, name=None):
    """The distortion loss of each ray over packed samples (as `ray_march` and
    `packed_volume_render(..., return_weights=True)` give them).

    Args:
      weights: [N] float32 rendering weights.
      t_starts, t_ends: [N] float32 sample intervals, sorted and
        non-overlapping along each ray (t_start_i <= t_end_i <= t_start_{i+1}),
        with m_i = (t_start_i + t_end_i) / 2, d_i = t_end_i - t_start_i.
      ray_offsets, ray_counts: [R] int32; ray r's samples are
        [ray_offsets[r], ray_offsets[r] + ray_counts[r]), the offsets the
        exclusive prefix sum of the counts, which sum to N.

    Returns [R] float32, differentiable w.r.t. weights, t_starts and t_ends.

    The samples are laid out as one [R, 2 S] row per ray (S = the largest
    count): each sample's interval, then the gap to the next one with weight
    0, so the op (`distortion_loss`, the O(S) form of
    kernels/distortion_loss/distortion_loss.h, on every backend) computes exactly the
    loss of the packed samples; gaps and padding contribute nothing. Memory
    is O(R * max count).
    """
    with tf.name_scope(name or "packed_distortion_loss"):
        for arg, value in (("weights", weights), ("t_starts", t_starts), ("t_ends", t_ends)):
            dtype = getattr(value, "dtype", None)
            if dtype is not None and tf.as_dtype(dtype) != tf.float32:
                raise TypeError(f"packed_distortion_loss: '{arg}' must be float32, got {tf.as_dtype(dtype).name}")
        for arg, value in (("ray_offsets", ray_offsets), ("ray_counts", ray_counts)):
            dtype = getattr(value, "dtype", None)
            if dtype is not None and tf.as_dtype(dtype) != tf.int32:
                raise TypeError(f"packed_distortion_loss: '{arg}' must be int32, got {tf.as_dtype(dtype).name}")
        weights = tf.convert_to_tensor(weights, dtype_hint=tf.float32)
        t_starts = tf.convert_to_tensor(t_starts, dtype_hint=tf.float32)
        t_ends = tf.convert_to_tensor(t_ends, dtype_hint=tf.float32)
        offsets = tf.convert_to_tensor(ray_offsets, dtype=tf.int32)
        counts = tf.convert_to_tensor(ray_counts, dtype=tf.int32)
        n = tf.shape(weights)[0]
        rays = tf.shape(counts)[0]
        checks = [
            tf.debugging.assert_equal(tf.shape(t_starts), tf.shape(weights),
                                      message="packed_distortion_loss: 't_starts' must be [N] like 'weights'"),
            tf.debugging.assert_equal(tf.shape(t_ends), tf.shape(weights),
                                      message="packed_distortion_loss: 't_ends' must be [N] like 'weights'"),
            tf.debugging.assert_equal(tf.shape(offsets), tf.shape(counts),
                                      message="packed_distortion_loss: 'ray_offsets' must be [R] like 'ray_counts'"),
            tf.debugging.assert_non_negative(counts, message="packed_distortion_loss: 'ray_counts' must be >= 0"),
            tf.debugging.assert_equal(offsets, tf.cumsum(counts, exclusive=True),
                                      message="packed_distortion_loss: 'ray_offsets' must be the exclusive prefix "
                                              "sum of 'ray_counts' (samples packed in ray order)"),
            tf.debugging.assert_equal(tf.reduce_sum(counts), n,
                                      message="packed_distortion_loss: 'ray_counts' must sum to N, the length of "
                                              "'weights'"),
        ]
        with tf.control_dependencies(checks):
            s = tf.reduce_max(tf.concat([counts, [0]], 0))
            ray = tf.repeat(tf.range(rays), counts)
            k = tf.range(n) - tf.gather(offsets, ray)
            w = tf.scatter_nd(tf.stack([ray, 2 * k], 1), weights, tf.stack([rays, 2 * s]))
            # Boundaries 2k and 2k + 1 are sample k's interval; the rest of the
            # row repeats the ray's last t_end (zero-width padding).
            last = tf.gather(tf.concat([t_ends, [0.0]], 0), tf.where(counts > 0, offsets + counts - 1, n))
            t = tf.broadcast_to(last[:, None], tf.stack([rays, 2 * s + 1]))
            t = tf.tensor_scatter_nd_update(t, tf.stack([ray, 2 * k], 1), t_starts)
            t = tf.tensor_scatter_nd_update(t, tf.stack([ray, 2 * k + 1], 1), t_ends)
            return distortion_loss(w, t)


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest)."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("distortion_loss"), []
    for r, s in [(37, 19), (0, 4), (5, 0), (4096, 64)]:
        _, _, t = selftest.rays(rng, r, s)
        w = rng.uniform(0, 1, (r, s)).astype(np.float32)
        out.append(selftest.case("distortion_loss", f"rays={r} samples={s}", np.float32, [w, t], distortion_loss,
                                 1e-4))
    return out
