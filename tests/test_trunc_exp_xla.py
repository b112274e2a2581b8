"""TruncExp and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import trunc_exp as trunc_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1000,), (33, 17), (), (4, 0)])
def test_trunc_exp_and_gradient(dtype, shape):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-10, 10, shape).astype(dtype))
    dy = tf.constant(rng.uniform(-2, 2, shape).astype(dtype))
    xla, plain = both(with_grad(metal_ops.trunc_exp, x, output_grad=dy), x)
    trunc_ref.assert_like(xla[0], trunc_ref.forward(x.numpy()), dtype)
    trunc_ref.assert_like(xla[1][0], trunc_ref.grad(dy.numpy(), x.numpy()), dtype)
    assert_same(xla, plain)


def test_trunc_exp_grad_shape_mismatch_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda dy, x: lib.metal_ops_trunc_exp_grad(dy, x), tf.zeros([3]), tf.zeros([4]))
    assert "TruncExpGrad: 'dy' has shape [3] but 'x' has shape [4]" in message
