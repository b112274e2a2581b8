"""Keras 3 layers built on metal_ops ops."""
import math

import keras
import tensorflow as tf

from metal_ops.hash_encode import INTERPOLATIONS, OUT_OF_RANGE_MODES, hash_encode, hash_grid_size

__all__ = ["HashEncoding"]


@keras.saving.register_keras_serializable(package="metal_ops")
class HashEncoding(keras.layers.Layer):
    """Multiresolution hash encoding (instant-NGP) with a trainable table.

    Maps [..., D] coordinates in [0, 1] (D in 1..4) to [..., num_levels *
    features_per_level] features with `metal_ops.hash_encode`. The table is a
    trainable weight of shape [hash_grid_size(D, ...), features_per_level],
    initialised uniform(-1e-4, 1e-4) as in instant-NGP.

    Args:
      num_levels, features_per_level, log2_hashmap_size, base_resolution:
        the grid (defaults: instant-NGP's NeRF configuration).
      finest_resolution: resolution of the last level; ignored when
        `per_level_scale` is given, otherwise per_level_scale =
        exp(ln(finest_resolution / base_resolution) / (num_levels - 1)).
      interpolation: "linear" or "smoothstep".
      out_of_range: "clamp", "wrap" or "zero" (see `metal_ops.hash_encode`).
      table_dtype: "float32" or "float16": storage of the table. Arithmetic is
        float32 either way; under a mixed-precision policy the table keeps this
        dtype (it is not autocast) and the output is cast to the compute dtype.
    """

    def __init__(self, num_levels=16, features_per_level=2, log2_hashmap_size=19, base_resolution=16,
                 finest_resolution=2048, per_level_scale=None, interpolation="linear", out_of_range="clamp",
                 table_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"HashEncoding: interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}")
        if out_of_range not in OUT_OF_RANGE_MODES:
            raise ValueError(f"HashEncoding: out_of_range must be one of {OUT_OF_RANGE_MODES}, got {out_of_range!r}")
        if features_per_level not in (1, 2, 4, 8):
            raise ValueError(f"HashEncoding: features_per_level must be 1, 2, 4 or 8, got {features_per_level}")
        if table_dtype not in ("float32", "float16"):
            raise ValueError(f"HashEncoding: table_dtype must be 'float32' or 'float16', got {table_dtype!r}")
        self.num_levels = int(num_levels)
        self.features_per_level = int(features_per_level)
        self.log2_hashmap_size = int(log2_hashmap_size)
        self.base_resolution = int(base_resolution)
        self.finest_resolution = None if finest_resolution is None else float(finest_resolution)
        self.per_level_scale = None if per_level_scale is None else float(per_level_scale)
        self.interpolation = interpolation
        self.out_of_range = out_of_range
        self.table_dtype = table_dtype
        # Custom ops have no XLA kernel (Keras turns XLA on by itself on GPUs).
        self.supports_jit = False

    @property
    def effective_per_level_scale(self):
        if self.per_level_scale is not None:
            return self.per_level_scale
        if self.num_levels == 1:
            return 1.0
        return math.exp(math.log(self.finest_resolution / self.base_resolution) / (self.num_levels - 1))

    def _grid_kwargs(self):
        return dict(num_levels=self.num_levels, log2_hashmap_size=self.log2_hashmap_size,
                    base_resolution=self.base_resolution, per_level_scale=self.effective_per_level_scale)

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None or not 1 <= int(input_dim) <= 4:
            raise ValueError(f"HashEncoding: the last input dimension must be 1..4, got input shape {input_shape}")
        self.input_dim = int(input_dim)
        rows = hash_grid_size(self.input_dim, **self._grid_kwargs())
        self.table = self.add_weight(
            name="table",
            shape=(rows, self.features_per_level),
            initializer=keras.initializers.RandomUniform(-1e-4, 1e-4),
            dtype=self.table_dtype,
            trainable=True,
            autocast=False,
        )

    def call(self, inputs):
        inputs = tf.convert_to_tensor(inputs)
        inputs = tf.cast(inputs, tf.float32)
        leading = tf.shape(inputs)[:-1]
        flat = tf.reshape(inputs, [-1, self.input_dim])
        table = tf.convert_to_tensor(self.table.value)
        encoded = hash_encode(flat, table, interpolation=self.interpolation, out_of_range=self.out_of_range,
                              **self._grid_kwargs())
        width = self.num_levels * self.features_per_level
        encoded = tf.reshape(encoded, tf.concat([leading, [width]], axis=0))
        return tf.cast(encoded, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_levels * self.features_per_level,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_levels=self.num_levels,
            features_per_level=self.features_per_level,
            log2_hashmap_size=self.log2_hashmap_size,
            base_resolution=self.base_resolution,
            finest_resolution=self.finest_resolution,
            per_level_scale=self.per_level_scale,
            interpolation=self.interpolation,
            out_of_range=self.out_of_range,
            table_dtype=self.table_dtype,
        )
        return config
