"""DistortionLoss and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import distortion_loss as distortion_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("rays,samples", [(33, 24), (5, 1), (0, 8), (4, 0)])
def test_distortion_loss_and_gradients(rays, samples):
    rng = np.random.default_rng(rays + samples)
    w = tf.constant(rng.uniform(0, 1, (rays, samples)).astype(np.float32))
    t = tf.constant(np.cumsum(rng.uniform(0.01, 0.2, (rays, samples + 1)), axis=1).astype(np.float32))
    g = tf.constant(rng.normal(size=(rays,)).astype(np.float32))
    xla, plain = both(with_grad(metal_ops.distortion_loss, w, t, output_grad=g), w, t)
    loss, dw, dt = distortion_ref.reference(w.numpy(), t.numpy())
    np.testing.assert_allclose(xla[0], loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(xla[1][0], g.numpy()[:, None] * dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xla[1][1], g.numpy()[:, None] * dt, rtol=1e-4, atol=1e-4)
    assert_same(xla, plain)


def test_distortion_loss_bad_t_shape_is_a_compile_error():
    message = compile_error(metal_ops.distortion_loss, tf.zeros([3, 4]), tf.zeros([3, 4]))
    assert "DistortionLoss: 't' must be [R, S + 1] = [3, 5] for 'weights' of shape [3,4], got [3,4]" in message


@pytest.mark.cpu_semantics("a run-time check of the CPU kernel and its host handler")
def test_distortion_loss_unsorted_t_is_a_run_time_error():
    t = np.tile(np.arange(5, dtype=np.float32), (3, 1))
    t[2, 3] = 0.5
    with pytest.raises(tf.errors.OpError, match=r"ray 2 has t\[2, 2\] = 2 > t\[2, 3\] = 0.5"):
        tf.function(metal_ops.distortion_loss, jit_compile=True)(tf.ones([3, 4]), tf.constant(t))
