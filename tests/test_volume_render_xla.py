"""VolumeRender and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import volume_render as vr_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rays,samples", [(40, 16), (3, 1), (0, 8), (5, 0)])
@pytest.mark.parametrize("background", [None, "one", "per_ray"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_volume_render_and_gradients(dtype, rays, samples, background, return_weights):
    sigma, rgb, t = (tf.constant(a) for a in vr_ref.make_rays(rays, samples, seed=rays, dtype=dtype, surface=True))
    rng = np.random.default_rng(samples)
    bg = {None: None, "one": tf.constant(rng.uniform(size=3).astype(dtype)),
          "per_ray": tf.constant(rng.uniform(size=(rays, 3)).astype(dtype))}[background]
    cot = [tf.constant(rng.normal(size=s).astype(dtype)) for s in [(rays, 3), (rays,), (rays,), (rays, samples)]]

    def op(sigma, rgb, *bgs):
        out = metal_ops.volume_render(sigma, rgb, t, bgs[0] if bgs else None, early_termination=1e-3,
                                      return_weights=return_weights)
        return [out.rgb, out.depth, out.opacity] + ([out.weights] if return_weights else [])

    args = [sigma, rgb] + ([bg] if bg is not None else [])
    grads = cot if return_weights else cot[:3]
    xla, plain = both(with_grad(op, *args, output_grad=grads), *args)
    want = vr_ref.render(sigma.numpy(), rgb.numpy(), t.numpy(), None if bg is None else bg.numpy(), 1e-3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, ref in zip(xla[0], want):
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    # Exact but for the background's gradient: the wrapper sums [R, 3] over
    # the rays for a [3] background, and XLA orders that sum differently.
    assert_same(xla, plain, rtol=tol / 10, atol=tol / 10)


def test_volume_render_bad_rgb_shape_is_a_compile_error():
    message = compile_error(lambda s, c, t: metal_ops.volume_render(s, c, t).rgb, tf.zeros([4, 5]),
                            tf.zeros([4, 5, 2]), tf.zeros([4, 6]))
    assert "VolumeRender" in message and "'rgb'" in message


@pytest.mark.cpu_semantics("a run-time check of the CPU kernel and its host handler")
def test_volume_render_negative_sigma_is_a_run_time_error():
    sigma = np.ones([3, 4], np.float32)
    sigma[1, 2] = -1.0
    t = np.tile(np.arange(5, dtype=np.float32), (3, 1))
    fn = tf.function(lambda s: metal_ops.volume_render(s, tf.zeros([3, 4, 3]), t).rgb, jit_compile=True)
    with pytest.raises(tf.errors.OpError, match="'sigma' must be non-negative .*: ray 1, sample 2 has sigma = -1"):
        fn(tf.constant(sigma))
