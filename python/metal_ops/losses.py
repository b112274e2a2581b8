"""Keras 3 losses built on the fused loss ops.

- RobustLoss: keras.losses.Loss with fixed alpha / scale (Barron's general loss).
- log_partition: log Z(alpha) of Barron's density (metal_ops.robust_loss).

The losses that hold variables or read a model's internals are layers that
add or return a loss, in metal_ops.layers: AdaptiveRobustLossLayer (trainable
alpha and scale) and DistortionRegularization (mip-NeRF 360's distortion
regulariser, added with add_loss). Their former names here,
`AdaptiveRobustLoss` and `DistortionLoss`, still work (with a
DeprecationWarning) and load models saved under them.

The ops have XLA kernels where metal_ops._loader.has_xla_kernels() says so
(docs/XLA.md): a model with these losses and layers then compiles its train
step with XLA (`jit_compile=True`, or Keras's "auto" where a GPU is listed).
"""
import warnings

import keras
import numpy as np
import tensorflow as tf

from metal_ops.layers import AdaptiveRobustLossLayer, DistortionRegularization
from metal_ops.robust_loss import LOG_PARTITION_TABLE, log_partition, robust_loss

__all__ = ["LOG_PARTITION_TABLE", "RobustLoss", "log_partition"]


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
        # Validates here, in the constructor, not at the first batch.
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
        # Plain numbers or lists (NumPy values too), so the config is JSON.
        config.update({"alpha": np.asarray(self.alpha, np.float64).tolist(),
                       "scale": np.asarray(self.scale, np.float64).tolist()})
        return config


class _FormerName:
    """The base of a layer's former name here, listed before the layer:
    `class Old(_FormerName, Layer)` warns when made (a DeprecationWarning that
    names the layer) and, registered, loads models saved under `Old`."""

    def __init__(self, *args, **kwargs):
        mro = type(self).__mro__
        old, layer = mro[mro.index(_FormerName) - 1], mro[mro.index(_FormerName) + 1]
        warnings.warn(f"metal_ops.losses.{old.__name__} is deprecated: it is a layer, "
                      f"metal_ops.layers.{layer.__name__}", DeprecationWarning, stacklevel=2)
        super().__init__(*args, **kwargs)


@keras.saving.register_keras_serializable(package="metal_ops")
class AdaptiveRobustLoss(_FormerName, AdaptiveRobustLossLayer):
    """Deprecated name of metal_ops.layers.AdaptiveRobustLossLayer."""


@keras.saving.register_keras_serializable(package="metal_ops")
class DistortionLoss(_FormerName, DistortionRegularization):
    """Deprecated name of metal_ops.layers.DistortionRegularization."""
