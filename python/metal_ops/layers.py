"""Keras 3 layers built on metal_ops ops."""
import math

import keras
import tensorflow as tf

from metal_ops import _loader
from metal_ops.fused_mlp import fused_mlp
from metal_ops.hash_encode import INTERPOLATIONS, OUT_OF_RANGE_MODES, hash_encode, hash_grid_size

__all__ = ["FusedMLP", "HashEncoding"]


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
        # XLA kernels where XLA can use them (docs/XLA.md): Keras keeps XLA for the model.
        self.supports_jit = _loader.has_xla_kernels()

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


@keras.saving.register_keras_serializable(package="metal_ops")
class FusedMLP(keras.layers.Layer):
    """A stack of Dense layers evaluated as one `metal_ops.fused_mlp` op.

    Equivalent to `hidden_layers` x Dense(hidden_units, activation) followed by
    Dense(output_units, output_activation), with the same initialisers
    (Glorot-uniform kernels, zero biases) and the same weight layout:
    `get_weights()` is [W0, b0, W1, b1, ..., W_out, b_out] as the Dense stack's
    would be, so weights move between the two with `set_weights`.

    Args:
      output_units: width of the output, 1..128.
      hidden_units: width of every hidden layer: 16, 32, 64 or 128.
      hidden_layers: 1..8.
      activation: hidden activation: "none", "relu", "leaky_relu", "sigmoid"
        or "softplus".
      output_activation: None or one of those, or "trunc_exp" (exp with the
        gradient clamped to exp(+-15), instant-NGP's density activation).
      leaky_relu_alpha: slope below 0 for "leaky_relu".
      kernel_initializer, bias_initializer: as for Dense.

    Inputs [..., in_dim] with in_dim in 1..128. The op runs in float32, or in
    float16 (with float32 accumulation) on a GPU under a mixed-precision
    policy; on a machine with no GPU a float16 policy computes in float32 and
    casts the output. The choice follows whether TensorFlow lists a GPU, not
    a device scope: on a GPU machine, a mixed-precision model placed on the
    CPU gets the CPU kernel's error naming float16 (use a float32 policy there).
    """

    def __init__(self, output_units, hidden_units=64, hidden_layers=2, activation="relu", output_activation=None,
                 leaky_relu_alpha=0.2, kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.output_units = int(output_units)
        self.hidden_units = int(hidden_units)
        self.hidden_layers = int(hidden_layers)
        self.activation = activation
        self.output_activation = output_activation
        self.leaky_relu_alpha = float(leaky_relu_alpha)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._check(None)
        # XLA kernels where XLA can use them (docs/XLA.md): Keras keeps XLA for the model.
        self.supports_jit = _loader.has_xla_kernels()

    def _layer_shapes(self, input_dim):
        widths = [input_dim] + [self.hidden_units] * self.hidden_layers + [self.output_units]
        return [(widths[i], widths[i + 1]) for i in range(len(widths) - 1)]

    def _check(self, input_dim):
        """Raises ValueError with the op's own message if the op would refuse this network
        (input_dim None: every input width the op accepts is still possible).

        The op's shape function holds every check (kernels/spec/fused_mlp_spec.h);
        building the op once in a scratch graph runs it without computing.
        """
        with tf.Graph().as_default():
            shapes = self._layer_shapes(input_dim or 1)
            try:
                fused_mlp(tf.zeros([0, input_dim or 1]), [tf.zeros(s) for s in shapes], [tf.zeros(s[1:]) for s in shapes],
                          activation=self.activation, output_activation=self.output_activation,
                          leaky_relu_alpha=self.leaky_relu_alpha)
            except (tf.errors.InvalidArgumentError, ValueError) as e:
                message = (getattr(e, "message", None) or str(e)).split(" for '{{node")[0].strip()
                raise ValueError(f"{message} (layer {self.name!r}: output_units={self.output_units}, "
                                 f"hidden_units={self.hidden_units}, hidden_layers={self.hidden_layers}"
                                 + (f", input width {input_dim})" if input_dim else ")")) from None

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(f"FusedMLP: the last input dimension must be known, got input shape {input_shape}")
        self.input_dim = int(input_dim)
        self._check(self.input_dim)
        # Created in Dense-stack order so that get_weights()/set_weights() match
        # it; one attribute each, so tf.train.Checkpoint tracks them by name.
        shapes = self._layer_shapes(self.input_dim)
        for i, (rows, cols) in enumerate(shapes):
            setattr(self, f"kernel_{i}", self.add_weight(name=f"kernel_{i}", shape=(rows, cols),
                                                         initializer=self.kernel_initializer))
            setattr(self, f"bias_{i}", self.add_weight(name=f"bias_{i}", shape=(cols,),
                                                       initializer=self.bias_initializer))
        self._num_matrices = len(shapes)

    @property
    def kernels(self):
        return [getattr(self, f"kernel_{i}") for i in range(self._num_matrices)]

    @property
    def biases(self):
        return [getattr(self, f"bias_{i}") for i in range(self._num_matrices)]

    def _op_dtype(self):
        if self.compute_dtype == "float16" and tf.config.list_logical_devices("GPU"):
            return tf.float16
        return tf.float32

    def call(self, inputs):
        dtype = self._op_dtype()
        inputs = tf.cast(tf.convert_to_tensor(inputs), dtype)
        leading = tf.shape(inputs)[:-1]
        flat = tf.reshape(inputs, [-1, self.input_dim])
        y = fused_mlp(flat, [tf.cast(k, dtype) for k in self.kernels], [tf.cast(b, dtype) for b in self.biases],
                      activation=self.activation, output_activation=self.output_activation,
                      leaky_relu_alpha=self.leaky_relu_alpha)
        y = tf.reshape(y, tf.concat([leading, [self.output_units]], axis=0))
        return tf.cast(y, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            output_units=self.output_units,
            hidden_units=self.hidden_units,
            hidden_layers=self.hidden_layers,
            activation=self.activation,
            output_activation=self.output_activation,
            leaky_relu_alpha=self.leaky_relu_alpha,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
