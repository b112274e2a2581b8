"""Barron's general robust loss as one fused op (ops/robust_loss_op.cc).

The formulas live in kernels/common/robust_loss.h and are shared by the CPU,
CUDA and Metal kernels; docs/ROBUST_LOSS.md describes the numerics.
"""
import math
import numbers

import numpy as np
import tensorflow as tf

from metal_ops._loader import load_library

_SUPPORTED = (tf.float32, tf.float16, tf.bfloat16)


def _invalid(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def _check_constant(value, name):
    """Checks alpha / scale given as Python or NumPy numbers (any device)."""
    if isinstance(value, (numbers.Number, np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(value, dtype=np.float64)
        if name == "alpha" and np.isnan(arr).any():
            raise _invalid(f"RobustLoss: 'alpha' must not be NaN, got {value!r}")
        if name == "scale" and not (np.all(arr > 0) and np.all(np.isfinite(arr))):
            raise _invalid(f"RobustLoss: 'scale' must be positive and finite, got {value!r}")


def robust_loss(x, alpha, scale, name=None):
    """Elementwise general robust loss rho(x, alpha, scale) (Barron, CVPR 2019).

    rho = |alpha-2|/alpha * (((x/scale)^2/|alpha-2| + 1)^(alpha/2) - 1), with the
    limits alpha = 2 (L2), 0 (Cauchy), -inf (Welsch) and +inf exact.

    Args:
      x: residuals, float32 / float16 / bfloat16, any shape. Computed in
        float32, returned in x's dtype.
      alpha: shape, a scalar or a [C] vector broadcast along the last axis of x.
      scale: scale c > 0, a scalar or [C] like alpha.

    Returns a tensor of x's shape and dtype. Differentiable w.r.t. x, alpha and
    scale (one fused backward kernel; alpha/scale gradients summed over the
    broadcast axes). Raises InvalidArgumentError for NaN alpha or scale <= 0
    (given as numbers, or any value on CPU); see docs/ROBUST_LOSS.md for GPUs.
    """
    with tf.name_scope(name or "robust_loss"):
        _check_constant(alpha, "alpha")
        _check_constant(scale, "scale")
        x = tf.convert_to_tensor(x)
        if x.dtype not in _SUPPORTED:
            raise TypeError(
                f"robust_loss: 'x' must be float32, float16 or bfloat16, got {x.dtype.name}")
        alpha = tf.cast(alpha, tf.float32)
        scale = tf.cast(scale, tf.float32)
        return load_library().metal_ops_robust_loss(x, alpha, scale)


@tf.RegisterGradient("MetalOpsRobustLoss")
def _robust_loss_grad(op, grad):
    x, alpha, scale = op.inputs
    grad_x, grad_alpha, grad_scale = load_library().metal_ops_robust_loss_grad(grad, x, alpha, scale)
    return [grad_x, grad_alpha, grad_scale]
