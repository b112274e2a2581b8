"""Barron's general robust loss as one fused op (kernels/robust_loss/robust_loss_op.cc).

The formulas live in kernels/robust_loss/robust_loss.h and are shared by the CPU,
CUDA and Metal kernels; docs/ROBUST_LOSS.md describes the numerics.
"""
import math
import numbers
import os

import numpy as np
import tensorflow as tf

from metal_ops._args import float_tensor, invalid_argument
from metal_ops._loader import load_library

_SUPPORTED = (tf.float32, tf.float16, tf.bfloat16)


def _check_constant(value, name):
    """Checks alpha / scale given as Python or NumPy numbers (any device)."""
    if isinstance(value, (numbers.Number, np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(value, dtype=np.float64)
        if name == "alpha" and np.isnan(arr).any():
            raise invalid_argument(f"RobustLoss: 'alpha' must not be NaN, got {value!r}")
        if name == "scale" and not (np.all(arr > 0) and np.all(np.isfinite(arr))):
            raise invalid_argument(f"RobustLoss: 'scale' must be positive and finite, got {value!r}")


def robust_loss(x, alpha, scale, name=None):
    """Elementwise general robust loss rho(x, alpha, scale) (Barron, CVPR 2019).

    rho = |alpha-2|/alpha * (((x/scale)^2/|alpha-2| + 1)^(alpha/2) - 1), with the
    limits alpha = 2 (L2), 0 (Cauchy), -inf (Welsch) and +inf exact.

    Args:
      x: residuals, float32 / float16 / bfloat16, any shape. Computed in
        float32, returned in x's dtype.
      alpha: shape, a float32 scalar or [C] vector broadcast along the last
        axis of x (Python numbers and lists are converted).
      scale: scale c > 0, float32, a scalar or [C] like alpha.

    Returns a tensor of x's shape and dtype. Differentiable w.r.t. x, alpha and
    scale (one fused backward kernel; alpha/scale gradients summed over the
    broadcast axes). Raises InvalidArgumentError for NaN alpha or scale <= 0
    (given as numbers, or any value on CPU); see docs/ROBUST_LOSS.md for GPUs.
    """
    with tf.name_scope(name or "robust_loss"):
        _check_constant(alpha, "alpha")
        _check_constant(scale, "scale")
        x = float_tensor("robust_loss", "x", x, _SUPPORTED)
        alpha = float_tensor("robust_loss", "alpha", alpha)
        scale = float_tensor("robust_loss", "scale", scale)
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


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest)."""
    from metal_ops import selftest

    rng, out = selftest.rng("robust_loss"), []
    for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
        for shape, channels in [((257, 8), 8), ((0, 8), 8), ((4, 3), 1), ((65536, 3), 3)]:
            x = rng.standard_normal(shape).astype(dtype)
            alpha = rng.uniform(-3, 3, (channels,)).astype(np.float32)
            scale = rng.uniform(0.5, 2, (channels,)).astype(np.float32)
            out.append(selftest.case("robust_loss", f"shape={shape} channels={channels}", dtype, [x, alpha, scale],
                                     robust_loss, tol))
    return out
