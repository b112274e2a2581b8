"""Fuzzing FusedConv2D: random NHWC shapes (0-sized batch, spatial and
channel dims included), filter sizes, strides, dilations, SAME / VALID /
explicit padding, optional bias and residual, every activation, special
values; against TensorFlow's own conv2d + bias_add + add + activation
composite (an independent implementation). Then one mutation at a time of a
valid call, rejected naming the argument."""
import numpy as np
import tensorflow as tf
from hypothesis import assume, given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import SPECIAL_F32, expect_rejected, fuzz_settings

ACTS = {
    "none": lambda z, a: z,
    "relu": lambda z, a: tf.nn.relu(z),
    "relu6": lambda z, a: tf.nn.relu6(z),
    "elu": lambda z, a: tf.nn.elu(z),
    "leaky_relu": lambda z, a: tf.nn.leaky_relu(z, alpha=a),
    "sigmoid": lambda z, a: tf.sigmoid(z),
    "tanh": lambda z, a: tf.tanh(z),
    "swish": lambda z, a: z * tf.sigmoid(z),
}


@st.composite
def conv_case(draw):
    n, h, w = draw(st.sampled_from([0, 1, 2])), draw(st.integers(0, 7)), draw(st.integers(0, 7))
    cin, cout = draw(st.integers(0, 4)), draw(st.integers(1, 5))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = draw(st.sampled_from([1, 2]))
    dilations = 1 if strides > 1 else draw(st.sampled_from([1, 2]))
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    if padding == "EXPLICIT":
        padding = [[draw(st.integers(0, 2)), draw(st.integers(0, 2))], [draw(st.integers(0, 2)), draw(st.integers(0, 2))]]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.normal(size=(n, h, w, cin)).astype(np.float32)
    if x.size and draw(st.integers(0, 3)) == 0:
        x.reshape(-1)[rng.integers(0, x.size)] = rng.choice(np.asarray(SPECIAL_F32, np.float32))
    f = rng.normal(size=(kh, kw, cin, cout)).astype(np.float32)
    bias = rng.normal(size=(cout,)).astype(np.float32) if draw(st.booleans()) else None
    act = draw(st.sampled_from(sorted(ACTS)))
    alpha = draw(st.sampled_from([0.2, 0.01, -0.5, 1.5]))
    return x, f, bias, strides, dilations, padding, act, alpha, draw(st.booleans()), rng


def _output_shape(xs, fs, stride, dilation, padding):
    dims = []
    for axis in (1, 2):
        size, k = xs[axis], (fs[axis - 1] - 1) * dilation + 1
        if padding == "SAME":
            dims.append(-(-size // stride))
        elif padding == "VALID":
            dims.append(max(0, (size - k) // stride + 1) if size >= k else 0)
        else:
            total = size + padding[axis - 1][0] + padding[axis - 1][1]
            dims.append((total - k) // stride + 1 if total >= k else 0)
    return (xs[0], dims[0], dims[1], fs[3])


def expected_shape_quirk(x, f, strides, dilations, padding, act, alpha, composite, shape):
    """True when TF's composite disagrees with the convolution geometry."""
    if x.size == 0:
        return False
    return tuple(composite(x, f, None, None, strides, dilations, padding, act, alpha).shape) != tuple(shape)


def _composite(x, f, bias, residual, strides, dilations, padding, act, alpha):
    pad = padding if isinstance(padding, str) else [[0, 0]] + padding + [[0, 0]]
    z = tf.nn.conv2d(x, f, strides=strides, padding=pad, dilations=dilations)
    if bias is not None:
        z = tf.nn.bias_add(z, bias)
    if residual is not None:
        z = z + residual
    return ACTS[act](z, alpha)


@fuzz_settings(max_examples_fraction=0.75)
@given(case=conv_case(), graph=st.booleans())
def test_fused_conv2d_matches_tf_composite(case, graph):
    x, f, bias, strides, dilations, padding, act, alpha, with_residual, rng = case
    composite = tf.function(_composite) if graph else _composite
    try:  # geometry TensorFlow itself rejects in this mode (e.g. VALID on a 0-sized image in a graph)
        composite(x, f, bias, None, strides, dilations, padding, act, alpha)
    except (tf.errors.InvalidArgumentError, ValueError):
        assume(False)
    shape = _output_shape(x.shape, f.shape, strides, dilations, padding)
    residual = rng.normal(size=shape).astype(np.float32) if with_residual else None
    if expected_shape_quirk(x, f, strides, dilations, padding, act, alpha, composite, shape):
        # TF's eager conv2d mis-sizes some VALID outputs whose image is smaller
        # than the filter (e.g. H=1, filter 2, stride 2 gives 1 row, not 0):
        # only the geometry is checked then.
        got = metal_ops.fused_conv2d(x, f, bias=bias, residual=residual, strides=strides, padding=padding,
                                     dilations=dilations, activation=act, leaky_relu_alpha=alpha)
        assert got.shape == shape
        return
    if x.size == 0:
        # No input values: the convolution is 0 (TF's own eager conv2d returns
        # [..., in_channels] for an empty input, a TensorFlow quirk).
        z = np.zeros(shape, np.float32) + (0 if bias is None else bias) + (0 if residual is None else residual)
        expected = ACTS[act](tf.constant(z, tf.float32), alpha).numpy()
    else:
        # Eagerly: in a graph TF's remapper fuses Conv2D + BiasAdd + LeakyRelu for
        # oneDNN and loses a non-default alpha (a TensorFlow bug, see test_fused_conv2d_fusion.py).
        expected = _composite(x, f, bias, residual, strides, dilations, padding, act, alpha).numpy()
    fn = tf.function(metal_ops.fused_conv2d) if graph else metal_ops.fused_conv2d
    got = fn(x, f, bias=bias, residual=residual, strides=strides, padding=padding, dilations=dilations,
             activation=act, leaky_relu_alpha=alpha).numpy()
    assert got.shape == expected.shape == shape
    # NaN / inf propagate to the same outputs; finite values agree to float32 rounding.
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-4,
                               atol=1e-4 * (1 + np.sqrt(f.shape[0] * f.shape[1] * f.shape[2])))


MUTATIONS = ["filter_in_channels", "filter_rank", "input_rank", "bias_size", "bias_rank", "residual_shape",
             "strides", "dilations", "explicit_padding", "input_dtype"]


@fuzz_settings(max_examples_fraction=0.5)
@given(case=conv_case(), mutation=st.sampled_from(MUTATIONS))
def test_fused_conv2d_rejects_one_bad_argument(case, mutation):
    x, f, bias, strides, dilations, padding, act, alpha, with_residual, rng = case
    out_shape = _output_shape(x.shape, f.shape, strides, dilations, padding)
    kw = dict(bias=bias, residual=None, strides=strides, padding=padding, dilations=dilations, activation=act,
              leaky_relu_alpha=alpha)
    try:  # the unmutated call must be valid (e.g. VALID needs the image to cover the filter)
        metal_ops.fused_conv2d(x, f, **kw)
    except tf.errors.InvalidArgumentError:
        assume(False)
    if mutation == "filter_in_channels":
        f = np.zeros(f.shape[:2] + (f.shape[2] + 1, f.shape[3]), np.float32)
        names = ("filter", "input")
    elif mutation == "filter_rank":
        f = f[0]
        names = ("filter",)
    elif mutation == "input_rank":
        x = np.zeros(x.shape[1:], np.float32)
        names = ("input",)
    elif mutation == "bias_size":
        kw["bias"] = np.zeros((f.shape[3] + 1,), np.float32)
        names = ("bias",)
    elif mutation == "bias_rank":
        kw["bias"] = np.zeros((1, f.shape[3]), np.float32)
        names = ("bias",)
    elif mutation == "residual_shape":
        kw["residual"] = np.zeros(tuple(out_shape[:3]) + (out_shape[3] + 1,), np.float32)
        names = ("residual",)
    elif mutation == "strides":
        kw["strides"] = [0, -1][rng.integers(0, 2)]
        names = ("strides",)
    elif mutation == "dilations":
        kw["dilations"] = [0, -2][rng.integers(0, 2)]
        names = ("dilations",)
    elif mutation == "explicit_padding":
        kw["padding"] = [[-1, 0], [0, 1]]
        names = ("padding", "explicit_paddings")
    else:
        x = x.astype(np.float64)
        f = f.astype(np.float64)
        names = ("input", "T", "x")
    expect_rejected(lambda: metal_ops.fused_conv2d(x, f, **kw), *names)
