"""FusedMLP and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


def mlp_params(rng, widths):
    kernels = [tf.constant(rng.normal(0, 0.5, (a, b)).astype(np.float32)) for a, b in zip(widths, widths[1:])]
    biases = [tf.constant(rng.normal(0, 0.1, (b,)).astype(np.float32)) for b in widths[1:]]
    return kernels, biases


@pytest.mark.parametrize("rows", [37, 0])
@pytest.mark.parametrize("widths,activation,output_activation", [
    ((8, 16, 4), "relu", None),
    ((5, 32, 32, 3), "leaky_relu", "sigmoid"),
    ((3, 16, 16, 16, 1), "softplus", "trunc_exp"),
])
def test_fused_mlp_and_gradient(rows, widths, activation, output_activation):
    rng = np.random.default_rng(rows)
    x = tf.constant(rng.normal(size=(rows, widths[0])).astype(np.float32))
    kernels, biases = mlp_params(rng, widths)
    g = tf.constant(rng.normal(size=(rows, widths[-1])).astype(np.float32))

    def op(x, *params):
        n = len(params) // 2
        return metal_ops.fused_mlp(x, list(params[:n]), list(params[n:]), activation=activation,
                                   output_activation=output_activation, leaky_relu_alpha=0.1)

    xla, plain = both(with_grad(op, x, *kernels, *biases, output_grad=g), x, *kernels, *biases)
    assert_same(xla, plain, rtol=1e-5, atol=1e-5)


def test_fused_mlp_bad_kernel_shape_is_a_compile_error():
    rng = np.random.default_rng(0)
    kernels, biases = mlp_params(rng, (8, 16, 4))
    kernels[1] = tf.zeros([15, 4])
    message = compile_error(lambda x: metal_ops.fused_mlp(x, kernels, biases), tf.zeros([4, 8]))
    assert "FusedMLP" in message
