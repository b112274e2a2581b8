"""Keras 3 layers built on metal_ops ops.

- HashEncoding, FusedMLP: the NeRF field's encoding and MLPs.
- SHEncoding, TruncExp: the directions' encoding and the density's activation.
- VolumeRender: a field's samples rendered into pixels.
- AdaptiveRobustLossLayer: Barron's adaptive loss, with trainable alpha and
  scale (a layer because it holds variables); returns the loss.
- DistortionRegularization: mip-NeRF 360's distortion regulariser; adds
  itself with add_loss and passes its input through, as
  keras.layers.ActivityRegularization does.

The layers check their arguments with the ops' own checks (kernels/<op>/<op>_spec.h),
when they are made: `_check_with_op` runs the op once on the CPU on empty
inputs (no rows to compute), whose kernel runs every check of the
attributes and shapes; a failed check is a ValueError with the op's own
message (metal_ops._args.spec_errors); an argument of the wrong type or
choice is a TypeError or ValueError naming it, before any op runs
(metal_ops._args). An input of the wrong rank, and a built layer's input of
another width, are refused with Keras's input-spec message.

Dtypes (README "Dtypes"): HashEncoding, SHEncoding and FusedMLP compute on
the op's dtype and return the layer's compute dtype (its dtype policy), as
Dense does; HashEncoding and SHEncoding take their coordinates and
directions in float32 under every policy (their `input_dtype`), as do
VolumeRender (whose outputs are float32) and the loss layers.
"""
import warnings

import keras
import numpy as np
import tensorflow as tf

from metal_ops import _loader
from metal_ops._args import choice, integer, number, op_attrs, spec_errors, spec_message
from metal_ops.distortion_loss import distortion_loss
from metal_ops.fused_mlp import OUTPUT_ACTIVATIONS, fused_activation, fused_mlp
from metal_ops.hash_encode import DEFAULT_GRID, hash_encode, hash_grid_size, per_level_scale_for
from metal_ops.robust_loss import log_partition, robust_loss
from metal_ops.sh_encode import sh_encode
from metal_ops.trunc_exp import trunc_exp
from metal_ops.volume_render import volume_render

__all__ = ["AdaptiveRobustLossLayer", "DistortionRegularization", "FusedMLP", "HashEncoding", "SHEncoding",
           "TruncExp", "VolumeRender"]


def __dir__():  # the public names (not the modules this one imports)
    return sorted(__all__)


def _check_with_op(layer, arguments, fn, *shapes_and_dtypes):
    """Runs `fn` (which calls one op) eagerly on the CPU on zeros of
    `shapes_and_dtypes` ((shape, dtype), or a list of them): a failed check
    of the op is a ValueError with the op's message, naming the layer and
    its `arguments`; TensorFlow's own refusals (an attribute value outside
    its list) are ValueErrors with TensorFlow's message."""
    suffix = f" (layer {layer.name!r}: {arguments})"
    zeros = lambda s: [zeros(x) for x in s] if isinstance(s, list) else tf.zeros(*s)  # noqa: E731
    with spec_errors(suffix), tf.init_scope(), tf.device("/CPU:0"):
        try:
            fn(*[zeros(s) for s in shapes_and_dtypes])
        except (TypeError, tf.errors.InvalidArgumentError) as e:
            if spec_message(e) is not None:
                raise
            raise ValueError(f"{getattr(e, 'message', e)}{suffix}") from None


def _width_spec(width, min_ndim=1):
    """The input_spec of a layer for inputs [..., width] of at least
    `min_ndim` dimensions (width None: any): Keras's message for another
    rank or width names the layer, the axis and both values."""
    return keras.layers.InputSpec(min_ndim=min_ndim, axes=None if width is None else {-1: width})


@keras.saving.register_keras_serializable(package="metal_ops")
class HashEncoding(keras.layers.Layer):
    """Multiresolution hash encoding (instant-NGP) with a trainable table.

    Maps [..., D] coordinates in [0, 1] (D in 1..4) to [..., num_levels *
    features_per_level] features with `metal_ops.hash_encode`. The table is a
    trainable weight of shape [hash_grid_size(D, ...), features_per_level],
    initialised uniform(-1e-4, 1e-4) as in instant-NGP.

    Args:
      num_levels, features_per_level, log2_hashmap_size, base_resolution:
        the grid (defaults: instant-NGP's NeRF configuration, as for
        `metal_ops.hash_encode`).
      finest_resolution: resolution of the last level; ignored when
        `per_level_scale` is given, otherwise per_level_scale =
        exp(ln(finest_resolution / base_resolution) / (num_levels - 1)).
      interpolation: "linear" or "smoothstep".
      out_of_range: "clamp", "wrap" or "zero" (see `metal_ops.hash_encode`).
      table_dtype: "float32" or "float16": storage of the table. Arithmetic is
        float32 either way; under a mixed-precision policy the table keeps this
        dtype (it is not autocast) and the output is cast to the compute dtype.
      table_initializer: the table's initializer (Keras name, instance or
        config); default uniform(-1e-4, 1e-4), instant-NGP's.
      table_regularizer, table_constraint: as Embedding's
        embeddings_regularizer and embeddings_constraint.

    Inputs [..., D] (any floating dtype: cast to float32, the op's) with D in
    1..4; the output [..., num_levels * features_per_level] has the layer's
    compute dtype. Coordinates outside [0, 1] follow `out_of_range`
    ("clamp" by default: clamped onto the grid, zero input gradient there).

    The op checks the arguments when the layer is made (ValueError with the
    op's message); once built, an input of another width D is refused with
    Keras's input-spec message.
    """

    def __init__(self, num_levels=DEFAULT_GRID["num_levels"], features_per_level=2,
                 log2_hashmap_size=DEFAULT_GRID["log2_hashmap_size"], base_resolution=DEFAULT_GRID["base_resolution"],
                 finest_resolution=DEFAULT_GRID["finest_resolution"], per_level_scale=None, interpolation="linear",
                 out_of_range="clamp", table_dtype="float32", table_initializer=None, table_regularizer=None,
                 table_constraint=None, **kwargs):
        super().__init__(**kwargs)
        self.table_initializer = keras.initializers.get(table_initializer or _DEFAULT_TABLE_INITIALIZER)
        self.table_regularizer = keras.regularizers.get(table_regularizer)
        self.table_constraint = keras.constraints.get(table_constraint)
        owner = type(self).__name__
        grid = op_attrs(owner, "MetalOpsHashEncode", num_levels=num_levels, log2_hashmap_size=log2_hashmap_size,
                        base_resolution=base_resolution, interpolation=interpolation, out_of_range=out_of_range)
        self.num_levels = grid["num_levels"]
        self.features_per_level = integer(owner, "features_per_level", features_per_level)
        self.log2_hashmap_size = grid["log2_hashmap_size"]
        self.base_resolution = grid["base_resolution"]
        self.finest_resolution = None if finest_resolution is None else number(owner, "finest_resolution",
                                                                                finest_resolution)
        self.per_level_scale = None if per_level_scale is None else number(owner, "per_level_scale", per_level_scale)
        self.interpolation = grid["interpolation"]
        self.out_of_range = grid["out_of_range"]
        self.table_dtype = choice(owner, "table_dtype", table_dtype, ("float32", "float16"))
        self.input_spec = _width_spec(None)
        # XLA kernels where XLA can use them (docs/XLA.md): Keras keeps XLA for the model.
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsHashEncode", "MetalOpsHashEncodeGrad"))
        self._check()

    @property
    def input_dtype(self):
        """float32, the op's coordinates (Keras casts the input to it; a
        mixed-precision policy does not round coordinates to float16)."""
        return "float32"

    @property
    def effective_per_level_scale(self):
        if self.per_level_scale is not None:
            return self.per_level_scale
        return per_level_scale_for(self.num_levels, self.base_resolution, self.finest_resolution)

    def _op_kwargs(self):
        return dict(num_levels=self.num_levels, log2_hashmap_size=self.log2_hashmap_size,
                    base_resolution=self.base_resolution, per_level_scale=self.effective_per_level_scale,
                    interpolation=self.interpolation, out_of_range=self.out_of_range)

    def _check(self):
        dtype = tf.as_dtype(self.table_dtype)
        scale = ("" if self.per_level_scale is not None
                 else f" from finest_resolution={self.finest_resolution:g}")
        arguments = (f"num_levels={self.num_levels}, features_per_level={self.features_per_level}, "
                     f"log2_hashmap_size={self.log2_hashmap_size}, base_resolution={self.base_resolution}, "
                     f"per_level_scale={self.effective_per_level_scale:g}{scale}, table_dtype={self.table_dtype!r}")
        grid = self._op_kwargs()
        # The grid's checks (MetalOpsHashGridOffsets), then hash_encode's on a one-dimensional grid's table.
        try:
            rows = hash_grid_size(1, grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"],
                                  grid["per_level_scale"])
        except tf.errors.InvalidArgumentError as e:  # the spec's message (hash_grid_size)
            raise ValueError(f"{e.message} (layer {self.name!r}: {arguments})") from None
        _check_with_op(self, arguments, lambda x, t: hash_encode(x, t, **grid),
                       ([0, 1], tf.float32), ([rows, max(self.features_per_level, 0)], dtype))

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None or not 1 <= int(input_dim) <= 4:
            raise ValueError(f"HashEncoding: the last input dimension must be 1..4, got input shape {input_shape}")
        self.input_dim = int(input_dim)
        grid = self._op_kwargs()
        rows = hash_grid_size(self.input_dim, grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"],
                              grid["per_level_scale"])
        self.table = self.add_weight(
            name="table",
            shape=(rows, self.features_per_level),
            initializer=self.table_initializer,
            regularizer=self.table_regularizer,
            constraint=self.table_constraint,
            dtype=self.table_dtype,
            trainable=True,
            autocast=False,
        )
        self.input_spec = _width_spec(self.input_dim)

    def call(self, inputs):
        inputs = tf.cast(tf.convert_to_tensor(inputs), tf.float32)
        leading = tf.shape(inputs)[:-1]
        flat = tf.reshape(inputs, [-1, self.input_dim])
        table = tf.convert_to_tensor(self.table.value)
        encoded = hash_encode(flat, table, **self._op_kwargs())
        width = self.num_levels * self.features_per_level
        encoded = tf.reshape(encoded, tf.concat([leading, [width]], axis=0))
        return tf.cast(encoded, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_levels * self.features_per_level,)

    def get_config(self):
        return _config_of(self, super().get_config(),
                          ("num_levels", "features_per_level", "log2_hashmap_size", "base_resolution",
                           "finest_resolution", "per_level_scale", "interpolation", "out_of_range", "table_dtype"),
                          table_initializer=keras.initializers.serialize(self.table_initializer),
                          table_regularizer=keras.regularizers.serialize(self.table_regularizer),
                          table_constraint=keras.constraints.serialize(self.table_constraint))


_DEFAULT_TABLE_INITIALIZER = {"class_name": "RandomUniform", "config": {"minval": -1e-4, "maxval": 1e-4}}


def _config_of(layer, config, names, **serialized):
    """A layer's get_config(): `config` (its base class's) with `layer`'s attributes `names`, then the
    `serialized` values."""
    config.update({name: getattr(layer, name) for name in names}, **serialized)
    return config


def _activation_config(activation):
    return activation if activation is None or isinstance(activation, str) else keras.activations.serialize(activation)


@keras.saving.register_keras_serializable(package="metal_ops")
class FusedMLP(keras.layers.Layer):
    """A stack of Dense layers evaluated as one `metal_ops.fused_mlp` op.

    Equivalent to `hidden_layers` x Dense(hidden_units, activation) followed by
    Dense(units, output_activation), with the same initialisers
    (Glorot-uniform kernels, zero biases) and the same weight layout:
    `get_weights()` is [W0, b0, W1, b1, ..., W_out, b_out] as the Dense stack's
    would be, so weights move between the two with `set_weights`.

    Args:
      units: width of the output, 1..128 (`output_units`, its former name,
        still works, with a DeprecationWarning).
      hidden_units: width of every hidden layer: 16, 32, 64 or 128.
      hidden_layers: 1..8.
      activation: the hidden activation, fused into the op: "relu",
        "leaky_relu", "sigmoid", "softplus", None / "linear" (none), by name
        or as the Keras / TensorFlow function (keras.activations.relu,
        tf.nn.relu, ...). Any other activation is refused (ValueError).
      output_activation: the output's activation: any Keras activation, by
        name or callable. The op fuses the hidden activations' and
        "trunc_exp" (metal_ops.trunc_exp: exp with the gradient clamped to
        exp(+-15), instant-NGP's density activation); any other (say
        "tanh", or your own function) is applied to the op's output, which
        is what Dense(units, output_activation) computes.
      leaky_relu_alpha: slope below 0 for "leaky_relu".
      use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, kernel_constraint, bias_constraint,
        activity_regularizer: as for Dense (each applies to every matrix /
        bias of the stack; use_bias=False: no biases, get_weights() is
        [W0, W1, ..., W_out]).

    A NaN in an input row gives NaN in that output row (and NaN gradients),
    as the Dense stack does.

    Inputs [..., in_dim] with in_dim in 1..128. The op runs in float32, or in
    float16 (with float32 accumulation) on a GPU under a mixed-precision
    policy; on a machine with no GPU a float16 policy computes in float32 and
    casts the output. The choice follows whether TensorFlow lists a GPU, not
    a device scope: on a GPU machine, a mixed-precision model placed on the
    CPU gets the CPU kernel's error naming float16 (use a float32 policy there).

    The op checks the arguments when the layer is made, and the input width
    when it is built (ValueError with the op's message); once built, an input
    of another width is refused with Keras's input-spec message.
    """

    def __init__(self, units=None, hidden_units=64, hidden_layers=2, activation="relu", output_activation=None,
                 leaky_relu_alpha=0.2, use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 **kwargs):
        output_units = kwargs.pop("output_units", None)
        super().__init__(**kwargs)
        if output_units is not None:
            warnings.warn("FusedMLP: 'output_units' is deprecated, use 'units'", DeprecationWarning, stacklevel=2)
            if units is not None:
                raise ValueError("FusedMLP: give 'units' (or its deprecated name 'output_units'), not both")
            units = output_units
        if units is None:
            raise ValueError("FusedMLP: 'units' (the width of the output) is required")
        self.units = integer("FusedMLP", "units", units, minimum=1)
        self.hidden_units = integer("FusedMLP", "hidden_units", hidden_units, minimum=1)
        self.hidden_layers = integer("FusedMLP", "hidden_layers", hidden_layers, minimum=1)
        self.input_spec = _width_spec(None, min_ndim=2)
        self.activation = activation
        self.output_activation = output_activation
        self.leaky_relu_alpha = number("FusedMLP", "leaky_relu_alpha", leaky_relu_alpha)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self._hidden_name = fused_activation(activation)
        if self._hidden_name is None:
            raise ValueError(f"FusedMLP: the hidden activation {activation!r} has no fused form: give relu, "
                             f"leaky_relu, sigmoid, softplus or None, by name or as the keras.activations / tf.nn "
                             f"function (or compose Dense layers for others)")
        # The output activation: fused when the op has it, else applied to the op's output.
        self._output_name = fused_activation(output_activation)
        self._output_fn = None
        if self._output_name not in OUTPUT_ACTIVATIONS:
            self._output_fn = keras.activations.get(output_activation)
            self._output_name = "none"
        self._check(None)
        # XLA kernels where XLA can use them (docs/XLA.md): Keras keeps XLA for the model.
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsFusedMLP", "MetalOpsFusedMLPGrad"))

    @property
    def output_units(self):
        """The former name of `units`."""
        return self.units

    def _layer_shapes(self, input_dim):
        widths = [input_dim] + [self.hidden_units] * self.hidden_layers + [self.units]
        return [(widths[i], widths[i + 1]) for i in range(len(widths) - 1)]

    def _apply(self, x, kernels, biases):
        return fused_mlp(x, kernels, biases, activation=self._hidden_name, output_activation=self._output_name,
                         leaky_relu_alpha=self.leaky_relu_alpha)

    def _check(self, input_dim):
        """The op's checks of this network (input_dim None: any width the op
        accepts is still possible; 1 stands in for it)."""
        shapes = self._layer_shapes(input_dim or 1)
        arguments = (f"units={self.units}, hidden_units={self.hidden_units}, hidden_layers={self.hidden_layers}"
                     + (f", input width {input_dim}" if input_dim else ""))
        _check_with_op(self, arguments, self._apply, ([0, input_dim or 1], tf.float32),
                       [(s, tf.float32) for s in shapes], [(s[1:], tf.float32) for s in shapes])

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
            setattr(self, f"kernel_{i}", self.add_weight(
                name=f"kernel_{i}", shape=(rows, cols), initializer=self.kernel_initializer,
                regularizer=self.kernel_regularizer, constraint=self.kernel_constraint))
            if self.use_bias:
                setattr(self, f"bias_{i}", self.add_weight(
                    name=f"bias_{i}", shape=(cols,), initializer=self.bias_initializer,
                    regularizer=self.bias_regularizer, constraint=self.bias_constraint))
        self._num_matrices = len(shapes)
        self.input_spec = _width_spec(self.input_dim, min_ndim=2)

    @property
    def kernels(self):
        return [getattr(self, f"kernel_{i}") for i in range(self._num_matrices)]

    @property
    def biases(self):
        """The bias variables ([] with use_bias=False)."""
        return [getattr(self, f"bias_{i}") for i in range(self._num_matrices)] if self.use_bias else []

    def _op_dtype(self):
        if self.compute_dtype == "float16" and tf.config.list_logical_devices("GPU"):
            return tf.float16
        return tf.float32

    def call(self, inputs):
        dtype = self._op_dtype()
        inputs = tf.cast(tf.convert_to_tensor(inputs), dtype)
        leading = tf.shape(inputs)[:-1]
        flat = tf.reshape(inputs, [-1, self.input_dim])
        kernels = [tf.cast(k, dtype) for k in self.kernels]
        biases = ([tf.cast(b, dtype) for b in self.biases] if self.use_bias
                  else [tf.zeros(k.shape[1:], dtype) for k in kernels])
        y = self._apply(flat, kernels, biases)
        y = tf.cast(tf.reshape(y, tf.concat([leading, [self.units]], axis=0)), self.compute_dtype)
        return y if self._output_fn is None else self._output_fn(y)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        return _config_of(self, super().get_config(), ("units", "hidden_units", "hidden_layers", "use_bias"),
                          activation=_activation_config(self.activation),
                          output_activation=_activation_config(self.output_activation),
                          leaky_relu_alpha=self.leaky_relu_alpha,
                          kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                          bias_initializer=keras.initializers.serialize(self.bias_initializer),
                          kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
                          bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
                          kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
                          bias_constraint=keras.constraints.serialize(self.bias_constraint))


@keras.saving.register_keras_serializable(package="metal_ops")
class SHEncoding(keras.layers.Layer):
    """Real spherical harmonics of directions (`metal_ops.sh_encode`), as a layer.

    Maps [..., 3] directions (unit vectors for true spherical harmonics; used
    as given) to [..., degree**2] values. The directions are taken in float32
    under every policy (its `input_dtype`); the output has the layer's compute
    dtype. No weights.

    Args:
      degree: number of bands, 1 to 4 (1, 4, 9 or 16 values per direction).
    """

    def __init__(self, degree=4, **kwargs):
        super().__init__(**kwargs)
        self.degree = op_attrs(type(self).__name__, "MetalOpsSHEncode", degree=degree)["degree"]
        _check_with_op(self, f"degree={self.degree}", lambda d: sh_encode(d, degree=self.degree),
                       ([0, 3], tf.float32))
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsSHEncode", "MetalOpsSHEncodeGrad"))
        self.input_spec = _width_spec(3)

    @property
    def input_dtype(self):
        """float32: directions are not rounded to float16 by a mixed-precision policy."""
        return "float32"

    def call(self, inputs):
        return tf.cast(sh_encode(tf.cast(inputs, tf.float32), degree=self.degree), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.degree ** 2,)

    def get_config(self):
        return _config_of(self, super().get_config(), ("degree",))


@keras.saving.register_keras_serializable(package="metal_ops")
class TruncExp(keras.layers.Layer):
    """exp(x) with the gradient clamped to exp(+-15) (`metal_ops.trunc_exp`),
    instant-NGP's density activation, as a layer.

    Computes in the layer's compute dtype (float32, or float16 under a
    mixed-precision policy; other dtypes through float32); any shape; no
    weights.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsTruncExp", "MetalOpsTruncExpGrad"))

    def call(self, inputs):
        dtype = tf.as_dtype(self.compute_dtype)
        op_dtype = dtype if dtype in (tf.float32, tf.float16) else tf.float32
        return tf.cast(trunc_exp(tf.cast(inputs, op_dtype)), dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


@keras.saving.register_keras_serializable(package="metal_ops")
class VolumeRender(keras.layers.Layer):
    """Emission-absorption volume rendering of R rays of S samples
    (`metal_ops.volume_render`), as a layer.

    `VolumeRender()(sigma [R, S], rgb [R, S, 3], t [R, S + 1], background=None)`
    returns (rgb [R, 3], depth [R], opacity [R]), and the weights [R, S]
    after them with return_weights=True. It computes in float32 under every
    policy (the inputs are cast to it, its `input_dtype`) and returns float32,
    as Keras's losses do; gradients flow to sigma, rgb and background.

    Args: those of `metal_ops.volume_render`: early_termination,
      return_weights, validate.
    """

    def __init__(self, early_termination=1e-4, return_weights=False, validate=True, **kwargs):
        super().__init__(**kwargs)
        attrs = op_attrs(type(self).__name__, "MetalOpsVolumeRender", early_termination=early_termination,
                         return_weights=return_weights, validate=validate)
        self.early_termination = attrs["early_termination"]
        self.return_weights = attrs["return_weights"]
        self.validate = attrs["validate"]
        _check_with_op(self, f"early_termination={self.early_termination:g}",
                       lambda s, c, t: volume_render(s, c, t, early_termination=self.early_termination),
                       ([0, 1], tf.float32), ([0, 1, 3], tf.float32), ([0, 2], tf.float32))
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsVolumeRender", "MetalOpsVolumeRenderGrad"))

    @property
    def input_dtype(self):
        """float32: the rendering is computed in float32 (Keras casts the inputs to it)."""
        return "float32"

    def call(self, sigma, rgb, t, background=None):
        out = volume_render(sigma, rgb, t, background=background, early_termination=self.early_termination,
                            return_weights=self.return_weights, validate=self.validate)
        return tuple(out) if self.return_weights else tuple(out[:3])

    def get_config(self):
        return _config_of(self, super().get_config(), ("early_termination", "return_weights", "validate"))


@keras.saving.register_keras_serializable(package="metal_ops")
class AdaptiveRobustLossLayer(keras.layers.Layer):
    """Barron's adaptive loss as a layer: negative log-likelihood with trainable alpha and scale.

    alpha = alpha_lo + (alpha_hi - alpha_lo) * sigmoid(latent_alpha), in
    (0.001, 1.999) by default; scale = softplus(latent_scale) + scale_lo, as in
    the paper. Called on residuals (or on (y_true, y_pred)) it returns the mean
    over all elements of rho(x, alpha, c) + log(c) + log Z(alpha)
    (reduction="none": per element). Put it in a model (or train its
    `trainable_weights` in your own step) so alpha and scale are optimised.
    A layer, not a keras.losses.Loss, because it holds variables (the fixed-
    parameter loss is metal_ops.losses.RobustLoss).

    num_channels: 1 (one alpha / scale for everything) or the size of the
      residuals' last axis (one per channel, e.g. 3 for RGB); residuals of
      another width are refused with Keras's input-spec message.

    It computes in float32 (inputs cast to it, its variables never cast to
    float16), as Keras's losses do, also under a mixed-precision policy.
    """

    def __init__(self, num_channels=1, alpha_lo=0.001, alpha_hi=1.999, alpha_init=None,
                 scale_lo=1e-5, scale_init=1.0, reduction="mean", **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= alpha_lo < alpha_hi <= 2.0:
            raise ValueError(f"AdaptiveRobustLossLayer: need 0 <= alpha_lo < alpha_hi <= 2, got "
                             f"{alpha_lo}, {alpha_hi}")
        if alpha_init is None:
            alpha_init = 0.5 * (alpha_lo + alpha_hi)
        if not alpha_lo < alpha_init < alpha_hi:
            raise ValueError(f"AdaptiveRobustLossLayer: alpha_init {alpha_init} must lie in "
                             f"({alpha_lo}, {alpha_hi})")
        if not (scale_lo > 0 and scale_init > scale_lo):
            raise ValueError(f"AdaptiveRobustLossLayer: need 0 < scale_lo < scale_init, got "
                             f"{scale_lo}, {scale_init}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"AdaptiveRobustLossLayer: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        # XLA kernels where XLA can use them (docs/XLA.md): Keras keeps XLA for the model.
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsRobustLoss", "MetalOpsRobustLossGrad"))
        self.num_channels = int(num_channels)
        self.alpha_lo, self.alpha_hi = float(alpha_lo), float(alpha_hi)
        self.alpha_init, self.scale_lo, self.scale_init = float(alpha_init), float(scale_lo), float(scale_init)
        self.reduction = reduction
        frac = (self.alpha_init - self.alpha_lo) / (self.alpha_hi - self.alpha_lo)
        latent_alpha = float(np.log(frac / (1.0 - frac)))
        latent_scale = float(np.log(np.expm1(self.scale_init - self.scale_lo)))  # softplus^-1
        self.latent_alpha = self.add_weight(
            name="latent_alpha", shape=(self.num_channels,),
            initializer=keras.initializers.Constant(latent_alpha), dtype="float32", autocast=False)
        self.latent_scale = self.add_weight(
            name="latent_scale", shape=(self.num_channels,),
            initializer=keras.initializers.Constant(latent_scale), dtype="float32", autocast=False)
        if self.num_channels > 1:
            self.input_spec = _width_spec(self.num_channels)

    @property
    def input_dtype(self):
        """float32: the loss is computed in float32 (Keras casts the inputs to it)."""
        return "float32"

    def alpha(self):
        return self.alpha_lo + (self.alpha_hi - self.alpha_lo) * tf.sigmoid(
            tf.convert_to_tensor(self.latent_alpha))

    def scale(self):
        return tf.nn.softplus(tf.convert_to_tensor(self.latent_scale)) + self.scale_lo

    def call(self, y_true_or_residual, y_pred=None):
        x = tf.cast(y_true_or_residual, tf.float32)
        if y_pred is not None:
            x = tf.cast(y_pred, tf.float32) - x
        alpha, scale = self.alpha(), self.scale()
        if self.num_channels == 1:
            alpha, scale = alpha[0], scale[0]
        rho = robust_loss(x, alpha, scale)
        nll = rho + tf.math.log(scale) + log_partition(alpha)
        if self.reduction == "mean":
            return tf.reduce_mean(nll)
        if self.reduction == "sum":
            return tf.reduce_sum(nll)
        return nll

    def get_config(self):
        return _config_of(self, super().get_config(),
                          ("num_channels", "alpha_lo", "alpha_hi", "alpha_init", "scale_lo", "scale_init", "reduction"))


@keras.saving.register_keras_serializable(package="metal_ops")
class DistortionRegularization(keras.layers.Layer):
    """mip-NeRF 360 distortion regulariser as a Keras layer.

    `DistortionRegularization(multiplier)(weights [R, S], t [R, S + 1])`
    computes multiplier * mean over rays of metal_ops.distortion_loss(weights,
    t). With add_to_losses=True (default) it registers that value with
    add_loss and returns `weights` unchanged, as
    keras.layers.ActivityRegularization returns its input: put it in the
    path of the weights (`weights = DistortionRegularization()(weights, t)`)
    so that a functional model keeps it and trains with it (model.losses).
    With add_to_losses=False it returns the value itself (for a loss the
    caller adds). A layer, not a keras.losses.Loss, because it reads the
    model's internals (the ray weights), not (y_true, y_pred).

    It computes in float32 (inputs cast to it), as Keras's losses do, also
    under a mixed-precision policy; the weights pass through unchanged.
    """

    def __init__(self, multiplier=0.01, add_to_losses=True, **kwargs):
        super().__init__(**kwargs)
        if multiplier < 0:
            raise ValueError(f"DistortionRegularization: multiplier must be >= 0, got {multiplier}")
        # XLA kernels where XLA can use them (docs/XLA.md): Keras keeps XLA for the model.
        self.supports_jit = _loader.has_xla_kernels(("MetalOpsDistortionLoss", "MetalOpsDistortionLossGrad"))
        self.multiplier = float(multiplier)
        self.add_to_losses = bool(add_to_losses)

    @property
    def input_dtype(self):
        """float32: the loss is computed in float32 (Keras casts the inputs to it)."""
        return "float32"

    def call(self, weights, t):
        per_ray = distortion_loss(tf.cast(weights, tf.float32), tf.cast(t, tf.float32))
        count = tf.maximum(tf.cast(tf.size(per_ray), tf.float32), 1.0)  # R = 0 gives 0, not NaN
        value = self.multiplier * tf.reduce_sum(per_ray) / count
        if not self.add_to_losses:
            return value
        self.add_loss(value)
        return weights

    def get_config(self):
        return _config_of(self, super().get_config(), ("multiplier", "add_to_losses"))
