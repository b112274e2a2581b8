"""Fused convolution: act(conv2d(x, filters) + bias + residual) in one op.

kernels/fused_conv2d/fused_conv2d_op.cc, kernels/fused_conv2d/fused_conv2d_cpu.cc (OpenBLAS GEMM
with the bias, residual and activation in its output stage),
kernels/fused_conv2d/fused_conv2d_metal.cc (one cached MPSGraph per shape/attr set),
formulas in kernels/common/activations.h. The Grappler plugin
(metal_ops.fusion) writes this op into graphs by itself.
"""
import numbers

import tensorflow as tf

from metal_ops._args import float_tensor
from metal_ops._loader import load_library

ACTIVATIONS = ("none", "relu", "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "swish")
_PADDINGS = ("SAME", "VALID")


def _pair_attr(value, name):
    """int or [h, w] or [1, h, w, 1] -> the 4-element NHWC attr list."""
    if isinstance(value, numbers.Integral):
        v = [1, int(value), int(value), 1]
    else:
        v = [int(a) for a in value]
        if len(v) == 1:
            v = [1, v[0], v[0], 1]
        elif len(v) == 2:
            v = [1, v[0], v[1], 1]
        elif len(v) != 4:
            raise ValueError(f"{name} must be an int or a list of 1, 2 or 4 ints, got {value!r}")
    return v


def _padding_attrs(padding):
    """'SAME' | 'VALID' | [[t, b], [l, r]] | [[0,0],[t,b],[l,r],[0,0]] -> attrs."""
    if isinstance(padding, str):
        p = padding.upper()
        if p not in _PADDINGS:
            raise ValueError(f"padding must be 'SAME', 'VALID' or explicit pairs, got {padding!r}")
        return p, []
    pairs = [list(map(int, p)) for p in padding]
    if len(pairs) == 2:
        pairs = [[0, 0], pairs[0], pairs[1], [0, 0]]
    if len(pairs) != 4 or any(len(p) != 2 for p in pairs):
        raise ValueError(f"explicit padding must be [[top, bottom], [left, right]] or 4 pairs (NHWC), got {padding!r}")
    return "EXPLICIT", [v for p in pairs for v in p]


def fused_conv2d(x, filters, bias=None, residual=None, strides=1, padding="SAME", dilations=1,
                 data_format="NHWC", activation=None, leaky_relu_alpha=0.2, name=None):
    """activation(conv2d(x, filters) + bias + residual), fused into one pass.

    Args:
      x: float32 [batch, height, width, in_channels].
      filters: float32 [filter_height, filter_width, in_channels, out_channels].
      bias: optional [out_channels].
      residual: optional tensor with the output's shape (no broadcasting).
      strides, dilations: int, [h, w] or [1, h, w, 1].
      padding: "SAME", "VALID", or explicit [[top, bottom], [left, right]].
      data_format: "NHWC" (the only layout implemented).
      activation: None or one of "relu", "relu6", "elu", "leaky_relu",
        "sigmoid", "tanh", "swish".
      leaky_relu_alpha: slope for x < 0 of "leaky_relu".
    Differentiable with respect to x, filters, bias and residual.
    """
    if data_format != "NHWC":
        raise ValueError(f"data_format must be 'NHWC' (NCHW is not implemented), got {data_format!r}")
    act = "none" if activation is None else str(activation).lower()
    if act == "silu":
        act = "swish"
    if act not in ACTIVATIONS:
        raise ValueError(f"activation must be None or one of {ACTIVATIONS[1:]}, got {activation!r}")
    pad, explicit = _padding_attrs(padding)
    with tf.name_scope(name or "fused_conv2d"):
        x = float_tensor("fused_conv2d", "x", x)
        filters = float_tensor("fused_conv2d", "filters", filters)
        bias_list = [] if bias is None else [float_tensor("fused_conv2d", "bias", bias)]
        residual_list = [] if residual is None else [float_tensor("fused_conv2d", "residual", residual)]
        return load_library().metal_ops_fused_conv2d(
            input=x, filter=filters, bias=bias_list, residual=residual_list,
            strides=_pair_attr(strides, "strides"), padding=pad, explicit_paddings=explicit,
            data_format=data_format, dilations=_pair_attr(dilations, "dilations"),
            activation=act, leaky_relu_alpha=float(leaky_relu_alpha))


def _is_pointwise(op):
    """A 1x1, stride-1, unpadded convolution: a matrix product over pixels."""
    w_shape = op.inputs[1].shape
    return (w_shape.rank == 4 and w_shape[0] == 1 and w_shape[1] == 1
            and list(op.get_attr("strides")) == [1, 1, 1, 1]
            and not any(op.get_attr("explicit_paddings")))


def _conv_backprops(op, dz):
    x, w = op.inputs[0], op.inputs[1]
    if _is_pointwise(op):
        # Two matrix products on the [pixels, C] views, faster than TF's
        # Conv2DBackpropInput / Filter for pointwise convolutions (figures:
        # docs/FUSED_CONV2D.md).
        x_shape, w_shape = tf.shape(x), tf.shape(w)
        pixels = tf.reduce_prod(x_shape[:3])
        w2 = tf.reshape(w, w_shape[2:])
        dz2 = tf.reshape(dz, [pixels, w_shape[3]])
        dx = tf.reshape(tf.matmul(dz2, w2, transpose_b=True), x_shape)
        dw = tf.reshape(tf.matmul(tf.reshape(x, [pixels, w_shape[2]]), dz2, transpose_a=True), w_shape)
        return dx, dw
    kw = dict(strides=op.get_attr("strides"), padding=op.get_attr("padding"),
              explicit_paddings=op.get_attr("explicit_paddings"),
              dilations=op.get_attr("dilations"), data_format="NHWC")
    dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=w, out_backprop=dz, **kw)
    dw = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(w), out_backprop=dz, **kw)
    return dx, dw


@tf.RegisterGradient("MetalOpsFusedConv2D")
def _fused_conv2d_grad(op, grad):
    act = op.get_attr("activation").decode() if isinstance(op.get_attr("activation"), bytes) else op.get_attr("activation")
    alpha = op.get_attr("leaky_relu_alpha")
    num_bias = op.get_attr("num_bias")
    num_residual = op.get_attr("num_residual")
    lib = load_library()
    y = op.outputs[0]
    if act == "none":
        dz = grad
    else:
        features = []
        if act == "swish" or (act == "leaky_relu" and alpha < 0):
            # The derivative needs the pre-activation: recompute it with the same
            # fused op (no activation) instead of keeping it alive from forward.
            features = [lib.metal_ops_fused_conv2d(
                input=op.inputs[0], filter=op.inputs[1], bias=op.inputs[2:2 + num_bias],
                residual=op.inputs[2 + num_bias:2 + num_bias + num_residual],
                strides=op.get_attr("strides"), padding=op.get_attr("padding"),
                explicit_paddings=op.get_attr("explicit_paddings"), data_format="NHWC",
                dilations=op.get_attr("dilations"), activation="none")]
        dz = lib.metal_ops_fused_activation_grad(
            gradients=grad, outputs=y, features=features, activation=act, leaky_relu_alpha=alpha)
    dx, dw = _conv_backprops(op, dz)
    grads = [dx, dw]
    if num_bias:
        grads.append(tf.raw_ops.BiasAddGrad(out_backprop=dz, data_format="NHWC"))
    if num_residual:
        grads.append(dz)
    return grads


# Under XLA its gradient is TensorFlow's convolution gradients and
# MetalOpsFusedActivationGrad, not MetalOpsFusedConv2DGrad (metal_ops.selftest.xla_ops).
XLA_GRADIENT_OPS = {"MetalOpsFusedConv2D": "MetalOpsFusedActivationGrad"}


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest).

    No input channel: the output is activation(bias + residual); forward only,
    as TensorFlow's Conv2DBackpropInput rejects a zero-depth filter, and not
    under XLA: eager runs it, but in a graph (tf.function) the op's shape
    function refuses it, as Conv2D's does. The large case's filter gradient
    (TensorFlow's Conv2DBackpropFilter, not this library's kernel) runs the
    cuDNN algorithm that autotuning picks in the process, and their float32
    errors differ (docs/BUILDING.md, "TensorFlow's CUDA build on a machine
    without network"): its tolerance covers them.
    """
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("fused_conv2d"), []
    for shape, cin, cout, activation, tol in [((2, 9, 9), 4, 5, "relu", 1e-3), ((2, 9, 9), 0, 5, "sigmoid", 1e-3),
                                              ((4, 64, 64), 16, 32, "relu", 5e-3)]:
        x = rng.standard_normal(shape + (cin,)).astype(np.float32)
        w = rng.standard_normal((3, 3, cin, cout)).astype(np.float32)
        b = rng.standard_normal((cout,)).astype(np.float32)
        res = rng.standard_normal(shape + (cout,)).astype(np.float32)
        out.append(selftest.case("fused_conv2d", f"x={shape + (cin,)} cout={cout} {activation}", np.float32,
                                 [x, w, b, res],
                                 lambda a, f, bb, rr, act=activation: fused_conv2d(a, f, bias=bb, residual=rr,
                                                                                   activation=act), tol,
                                 {"activation": activation}, differentiable=cin > 0, xla=cin > 0))
    return out
