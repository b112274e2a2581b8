"""SHEncode and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import sh_encode as sh_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(257, 3), (4, 5, 3), (0, 3)])
@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_sh_encode_and_gradient(dtype, shape, degree):
    rng = np.random.default_rng(degree)
    d = rng.normal(size=shape)
    dirs = tf.constant((d / np.maximum(np.linalg.norm(d, axis=-1, keepdims=True), 1e-9)).astype(dtype))
    g = tf.constant(rng.normal(size=shape[:-1] + (degree * degree,)).astype(dtype))
    xla, plain = both(with_grad(lambda x: metal_ops.sh_encode(x, degree=degree), dirs, output_grad=g), dirs)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(xla[0].astype(np.float64), sh_ref.values(dirs.numpy(), degree), rtol=tol, atol=tol)
    np.testing.assert_allclose(xla[1][0].astype(np.float64), sh_ref.vjp(dirs.numpy(), g.numpy(), degree),
                               rtol=10 * tol, atol=10 * tol)
    assert_same(xla, plain)


def test_sh_encode_bad_dirs_shape_is_a_compile_error():
    message = compile_error(lambda x: metal_ops.sh_encode(x, degree=2), tf.zeros([4, 2]))
    assert "SHEncode: 'dirs' must be [..., 3] (x, y, z along the last axis), got shape [4,2]" in message


def test_sh_encode_grad_shape_mismatch_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda g, x: lib.metal_ops_sh_encode_grad(g, x, degree=2), tf.zeros([4, 9]),
                            tf.zeros([4, 3]))
    assert "SHEncodeGrad: 'grad' must have the values' shape [4,4] for 'dirs' [4,3] and degree 2, got [4,9]" in message
