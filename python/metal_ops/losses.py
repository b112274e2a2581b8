"""Keras 3 losses built on the fused loss ops.

- RobustLoss: keras.losses.Loss with fixed alpha / scale (Barron's general loss).
- AdaptiveRobustLoss: keras.layers.Layer holding trainable alpha and scale; returns
  the negative log-likelihood rho(x, alpha, c) + log c + log Z(alpha), with log Z
  from a table shipped in metal_ops/data (tools/build/make_log_partition_table.py).
- DistortionLoss: keras.layers.Layer for mip-NeRF 360's distortion regulariser;
  adds itself with add_loss (usable inside a NeRF model) and returns the value.

Custom ops have no XLA kernels: compile models that use these with
jit_compile=False (Keras picks XLA by itself when a GPU is present).
"""
import os

import keras
import numpy as np
import tensorflow as tf

from metal_ops.distortion_loss import distortion_loss
from metal_ops.robust_loss import robust_loss

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


@keras.saving.register_keras_serializable(package="metal_ops")
class RobustLoss(keras.losses.Loss):
    """Barron's general robust loss of y_pred - y_true, averaged over the last axis.

    alpha: shape (2 = L2, 1 = Charbonnier / pseudo-Huber, 0 = Cauchy,
      -2 = Geman-McClure, -inf = Welsch), a float or a per-channel list.
    scale: c > 0, a float or a per-channel list (the width of the quadratic bowl).
    """

    def __init__(self, alpha=1.0, scale=0.1, reduction="sum_over_batch_size", name="robust_loss",
                 dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.alpha = alpha
        self.scale = scale
        # Validates now, not at the first batch.
        robust_loss(np.zeros([np.size(alpha) if np.ndim(alpha) else 1], np.float32), alpha, scale)

    def call(self, y_true, y_pred):
        y_pred = tf.convert_to_tensor(y_pred)
        if y_pred.dtype not in (tf.float32, tf.float16, tf.bfloat16):
            y_pred = tf.cast(y_pred, tf.float32)
        y_true = tf.cast(y_true, y_pred.dtype)
        rho = robust_loss(y_pred - y_true, self.alpha, self.scale)
        return tf.reduce_mean(tf.cast(rho, tf.float32), axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update({"alpha": self.alpha, "scale": self.scale})
        return config


@keras.saving.register_keras_serializable(package="metal_ops")
class AdaptiveRobustLoss(keras.layers.Layer):
    """Barron's adaptive loss: negative log-likelihood with trainable alpha and scale.

    alpha = alpha_lo + (alpha_hi - alpha_lo) * sigmoid(latent_alpha), in
    (0.001, 1.999) by default; scale = softplus(latent_scale) + scale_lo, as in
    the paper. Called on residuals (or on (y_true, y_pred)) it returns the mean
    over all elements of rho(x, alpha, c) + log(c) + log Z(alpha)
    (reduction="none": per element). Put it in a model (or train its
    `trainable_weights` in your own step) so alpha and scale are optimised.

    num_channels: 1 (one alpha / scale for everything) or the size of the
      residuals' last axis (one per channel, e.g. 3 for RGB).
    """

    def __init__(self, num_channels=1, alpha_lo=0.001, alpha_hi=1.999, alpha_init=None,
                 scale_lo=1e-5, scale_init=1.0, reduction="mean", **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= alpha_lo < alpha_hi <= 2.0:
            raise ValueError(f"AdaptiveRobustLoss: need 0 <= alpha_lo < alpha_hi <= 2, got "
                             f"{alpha_lo}, {alpha_hi}")
        if alpha_init is None:
            alpha_init = 0.5 * (alpha_lo + alpha_hi)
        if not alpha_lo < alpha_init < alpha_hi:
            raise ValueError(f"AdaptiveRobustLoss: alpha_init {alpha_init} must lie in "
                             f"({alpha_lo}, {alpha_hi})")
        if not (scale_lo > 0 and scale_init > scale_lo):
            raise ValueError(f"AdaptiveRobustLoss: need 0 < scale_lo < scale_init, got "
                             f"{scale_lo}, {scale_init}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"AdaptiveRobustLoss: reduction must be 'mean', 'sum' or 'none'")
        self.supports_jit = False
        self.num_channels = int(num_channels)
        self.alpha_lo, self.alpha_hi = float(alpha_lo), float(alpha_hi)
        self.alpha_init, self.scale_lo, self.scale_init = float(alpha_init), float(scale_lo), float(scale_init)
        self.reduction = reduction
        frac = (self.alpha_init - self.alpha_lo) / (self.alpha_hi - self.alpha_lo)
        latent_alpha = float(np.log(frac / (1.0 - frac)))
        latent_scale = float(np.log(np.expm1(self.scale_init - self.scale_lo)))  # softplus^-1
        self.latent_alpha = self.add_weight(
            name="latent_alpha", shape=(self.num_channels,),
            initializer=keras.initializers.Constant(latent_alpha), dtype="float32")
        self.latent_scale = self.add_weight(
            name="latent_scale", shape=(self.num_channels,),
            initializer=keras.initializers.Constant(latent_scale), dtype="float32")

    def alpha(self):
        return self.alpha_lo + (self.alpha_hi - self.alpha_lo) * tf.sigmoid(
            tf.convert_to_tensor(self.latent_alpha))

    def scale(self):
        return tf.nn.softplus(tf.convert_to_tensor(self.latent_scale)) + self.scale_lo

    def call(self, y_true_or_residual, y_pred=None):
        x = tf.convert_to_tensor(y_true_or_residual)
        if y_pred is not None:
            y_pred = tf.convert_to_tensor(y_pred)
            x = y_pred - tf.cast(x, y_pred.dtype)
        if x.dtype not in (tf.float32, tf.float16, tf.bfloat16):
            x = tf.cast(x, tf.float32)
        alpha, scale = self.alpha(), self.scale()
        if self.num_channels == 1:
            alpha, scale = alpha[0], scale[0]
        rho = tf.cast(robust_loss(x, alpha, scale), tf.float32)
        nll = rho + tf.math.log(scale) + log_partition(alpha)
        if self.reduction == "mean":
            return tf.reduce_mean(nll)
        if self.reduction == "sum":
            return tf.reduce_sum(nll)
        return nll

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_channels": self.num_channels, "alpha_lo": self.alpha_lo, "alpha_hi": self.alpha_hi,
            "alpha_init": self.alpha_init, "scale_lo": self.scale_lo, "scale_init": self.scale_init,
            "reduction": self.reduction,
        })
        return config


@keras.saving.register_keras_serializable(package="metal_ops")
class DistortionLoss(keras.layers.Layer):
    """mip-NeRF 360 distortion regulariser as a Keras layer.

    `DistortionLoss(multiplier)(weights [R, S], t [R, S + 1])` returns
    multiplier * mean over rays of metal_ops.distortion_loss(weights, t) and,
    when add_to_losses is True (default), also registers it with add_loss so a
    model that calls it trains with it (model.losses).
    """

    def __init__(self, multiplier=0.01, add_to_losses=True, **kwargs):
        super().__init__(**kwargs)
        if multiplier < 0:
            raise ValueError(f"DistortionLoss: multiplier must be >= 0, got {multiplier}")
        self.supports_jit = False
        self.multiplier = float(multiplier)
        self.add_to_losses = bool(add_to_losses)

    def call(self, weights, t):
        per_ray = distortion_loss(weights, t)
        count = tf.maximum(tf.cast(tf.size(per_ray), tf.float32), 1.0)  # R = 0 gives 0, not NaN
        value = self.multiplier * tf.reduce_sum(per_ray) / count
        if self.add_to_losses:
            self.add_loss(value)
        return value

    def get_config(self):
        config = super().get_config()
        config.update({"multiplier": self.multiplier, "add_to_losses": self.add_to_losses})
        return config
