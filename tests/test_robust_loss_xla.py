"""RobustLoss and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import re

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import robust_loss as robust_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("dtype", [np.float32, np.float16, tf.bfloat16.as_numpy_dtype])
@pytest.mark.parametrize("shape", [(300,), (17, 6), (0, 6)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_robust_loss_and_gradients(dtype, shape, per_channel):
    rng = np.random.default_rng(len(shape))
    x = tf.constant(rng.normal(0, 2, shape).astype(dtype))
    channels = shape[-1] if per_channel else None
    alpha = tf.constant(rng.uniform(-3, 3, channels).astype(np.float32) if per_channel else np.float32(0.7))
    scale = tf.constant(rng.uniform(0.5, 2, channels).astype(np.float32) if per_channel else np.float32(1.3))
    g = tf.constant(rng.normal(size=shape).astype(dtype))
    xla, plain = both(with_grad(metal_ops.robust_loss, x, alpha, scale, output_grad=g), x, alpha, scale)
    tol = {np.float32: 1e-5}.get(dtype, 2e-2)
    xs = x.numpy().astype(np.float64)
    np.testing.assert_allclose(xla[0].astype(np.float64), robust_ref.rho_saturated(xs, alpha.numpy(), scale.numpy()),
                               rtol=tol, atol=tol)
    want_dx = g.numpy().astype(np.float64) * robust_ref.drho_dx(xs, alpha.numpy(), scale.numpy())
    np.testing.assert_allclose(xla[1][0].astype(np.float64), want_dx, rtol=10 * tol, atol=10 * tol)
    assert xla[1][1].shape == alpha.shape and xla[1][2].shape == scale.shape
    # The alpha and scale gradients are sums: XLA's result is the kernel's, bit for bit.
    assert_same(xla, plain)


def test_robust_loss_bad_alpha_shape_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda x, a, c: lib.metal_ops_robust_loss(x, a, c), tf.zeros([4, 3]), tf.zeros([2]),
                            tf.ones([]))
    assert "alpha" in message and "[2]" in message


@pytest.mark.cpu_semantics("a run-time check of the CPU kernel and its host handler")
@pytest.mark.parametrize("alpha,scale,what", [(float("nan"), 1.0, "alpha"), (1.0, 0.0, "scale"),
                                             (1.0, -1.0, "scale")])
def test_robust_loss_bad_values_are_run_time_errors(alpha, scale, what):
    """Values the CPU kernel checks are checked by the host handler: an XLA
    error at run time with the kernel's message, never a crash."""
    lib = metal_ops.load_library()
    fn = tf.function(lambda x, a, c: lib.metal_ops_robust_loss(x, a, c), jit_compile=True)
    with pytest.raises(tf.errors.OpError) as xla_error:
        fn(tf.ones([5]), tf.constant(alpha), tf.constant(scale))
    with pytest.raises(tf.errors.OpError) as plain_error:
        lib.metal_ops_robust_loss(tf.ones([5]), tf.constant(alpha), tf.constant(scale))
    assert isinstance(xla_error.value, tf.errors.InvalidArgumentError) and what in str(xla_error.value)
    plain_message = re.sub(r"^\{\{[^}]*\}\} ", "", str(plain_error.value).split(" [Op:")[0])
    assert plain_message in str(xla_error.value)
