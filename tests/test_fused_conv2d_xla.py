"""FusedConv2D and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import fused_conv2d as conv_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, on_gpu, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("shape,kernel,strides,padding,dilations", [
    ((2, 9, 7, 5), (3, 3), 1, "SAME", 1),
    ((1, 8, 8, 4), (1, 1), 1, "VALID", 1),
    ((2, 11, 10, 3), (3, 2), 2, [[1, 0], [2, 1]], 1),
    ((1, 12, 12, 2), (3, 3), 1, "SAME", 2),
    ((0, 5, 5, 3), (3, 3), 1, "SAME", 1),
])
@pytest.mark.parametrize("bias,residual", [(False, False), (True, True)])
@pytest.mark.parametrize("activation", [None, "relu", "swish", "leaky_relu"])
def test_fused_conv2d_and_gradients(shape, kernel, strides, padding, dilations, bias, residual, activation):
    rng = np.random.default_rng(shape[1] + kernel[0])
    x = tf.constant(rng.normal(size=shape).astype(np.float32))
    w = tf.constant(rng.normal(0, 0.3, size=kernel + (shape[3], 6)).astype(np.float32))
    kw = dict(strides=strides, padding=padding, dilations=dilations, activation=activation, leaky_relu_alpha=0.1)
    out_shape = metal_ops.fused_conv2d(x, w, **kw).shape
    b = tf.constant(rng.normal(size=6).astype(np.float32)) if bias else None
    r = tf.constant(rng.normal(size=out_shape).astype(np.float32)) if residual else None
    g = tf.constant(rng.normal(size=out_shape).astype(np.float32))
    extras = [t for t in (b, r) if t is not None]

    def op(x, w, *extra):
        it = iter(extra)
        return metal_ops.fused_conv2d(x, w, next(it) if bias else None, next(it) if residual else None, **kw)

    # An empty batch: forward only (XLA's own Conv2DBackpropFilter fails on it:
    # "Missing 1-th output").
    fn = op if shape[0] == 0 else with_grad(op, x, w, *extras, output_grad=g)
    xla, plain = both(fn, x, w, *extras)
    if shape[0] == 0:
        xla, plain = [xla], [plain]
    want = conv_ref.reference(x.numpy(), w.numpy(), None if b is None else b.numpy(),
                              None if r is None else r.numpy(), (strides, strides), padding, (dilations, dilations),
                              activation, 0.1)
    np.testing.assert_allclose(xla[0], want, rtol=1e-4, atol=1e-4)
    # The forward and the activation's gradient are the kernels' bits; the
    # convolution gradients are TensorFlow's (XLA's under jit_compile). On a
    # GPU, XLA's convolution gradients differ from TensorFlow's by TF32-sized
    # amounts (docs/XLA.md, "On a GPU").
    np.testing.assert_array_equal(xla[0], plain[0])
    tol = 1e-2 if on_gpu() else 1e-4
    assert_same(xla, plain, rtol=tol, atol=tol)


def test_fused_conv2d_bad_bias_is_a_compile_error():
    message = compile_error(lambda x, w, b: metal_ops.fused_conv2d(x, w, b), tf.zeros([1, 4, 4, 3]),
                            tf.zeros([3, 3, 3, 5]), tf.zeros([4]))
    assert "bias must have shape [5] (the filter's out_channels), got shape [4]" in message
