"""mip-NeRF 360's distortion loss in O(S) per ray (ops/distortion_loss_op.cc).

The formulas live in kernels/common/distortion_loss.h (prefix-sum form of
DVGOv2) and are shared by the CPU, CUDA and Metal kernels.
"""
import tensorflow as tf

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
        for arg, value in (("weights", weights), ("t", t)):
            dtype = getattr(value, "dtype", None)  # tensors and arrays: no silent casts
            if dtype is not None and tf.as_dtype(dtype) != tf.float32:
                raise TypeError(f"distortion_loss: '{arg}' must be float32, got {tf.as_dtype(dtype).name}")
        weights = tf.convert_to_tensor(weights, dtype_hint=tf.float32)
        t = tf.convert_to_tensor(t, dtype_hint=tf.float32)
        return load_library().metal_ops_distortion_loss(weights, t)


@tf.RegisterGradient("MetalOpsDistortionLoss")
def _distortion_loss_grad(op, grad):
    weights, t = op.inputs
    grad_weights, grad_t = load_library().metal_ops_distortion_loss_grad(grad, weights, t)
    return [grad_weights, grad_t]
