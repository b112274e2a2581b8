"""Barron's general robust loss as one fused op (ops/robust_loss_op.cc).

The formulas live in kernels/robust_loss/robust_loss.h and are shared by the CPU,
CUDA and Metal kernels; docs/ROBUST_LOSS.md describes the numerics.
"""
import math
import numbers
import os

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


_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
LOG_PARTITION_TABLE = os.path.join(_DATA_DIR, "robust_loss_log_partition.npz")
_table = None


def _log_partition_table():
    global _table
    if _table is None:
        if not os.path.exists(LOG_PARTITION_TABLE):
            raise FileNotFoundError(
                f"{LOG_PARTITION_TABLE} is missing: the package data was not installed. "
                f"Rebuild it with `python tools/build/make_log_partition_table.py`.")
        with np.load(LOG_PARTITION_TABLE) as data:
            _table = {k: np.asarray(data[k]) for k in ("alpha", "log_z", "dlog_z")}
    return _table


def log_partition(alpha):
    """log Z(alpha) of the robust-loss density for alpha in [0, 2] (float32).

    Cubic Hermite interpolation of a tabulated numerical integral (values and
    slopes), differentiable w.r.t. alpha; alpha is clipped to [0, 2] (Z is
    infinite for alpha < 0, the distribution improper).
    """
    table = _log_partition_table()
    alpha = tf.convert_to_tensor(alpha, tf.float32)
    n = table["alpha"].shape[0]
    h = float(table["alpha"][1] - table["alpha"][0])
    values = tf.constant(table["log_z"], tf.float32)
    # differences taken in float64, so the slope (f1 - f0) / h has no float32 cancellation
    deltas = tf.constant(np.diff(table["log_z"]), tf.float32)
    slopes = tf.constant(table["dlog_z"] * h, tf.float32)
    pos = tf.clip_by_value(alpha, 0.0, 2.0) / h
    idx = tf.clip_by_value(tf.floor(pos), 0.0, float(n - 2))
    t = pos - idx
    i0 = tf.cast(idx, tf.int32)
    f0, delta = tf.gather(values, i0), tf.gather(deltas, i0)
    d0, d1 = tf.gather(slopes, i0), tf.gather(slopes, i0 + 1)
    t2 = t * t
    t3 = t2 * t
    # cubic Hermite: f0 h00 + f1 h01 + h d0 h10 + h d1 h11, with h00 + h01 = 1
    return f0 + delta * (3 * t2 - 2 * t3) + d0 * (t3 - 2 * t2 + t) + d1 * (t3 - t2)
