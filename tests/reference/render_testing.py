"""Test scaffolding both renderers' tests share (VolumeRender and
PackedVolumeRender; CPU, CUDA harness): backgrounds, cotangents, the
gradients through the op, the gradient tolerances and checks, the parameter
grids. NumPy and pytest at import: the CUDA tests run without TensorFlow
(render_grads imports it when called)."""
import numpy as np
import pytest


def grid(**axes):
    """A decorator parametrizing a test over the cross product of the axes,
    one pytest.mark.parametrize per axis (ids in the order given)."""
    def apply(test):
        for name, values in reversed(list(axes.items())):
            test = pytest.mark.parametrize(name, values)(test)
        return test
    return apply


def make_background(kind, R, dtype, seed=1):
    """None ("none"), one colour [3] ("shared") or one per ray [R, 3] (else)."""
    rng = np.random.default_rng(seed)
    if kind == "none":
        return None
    if kind == "shared":
        return rng.uniform(0, 1, size=3).astype(dtype)
    return rng.uniform(0, 1, size=(R, 3)).astype(dtype)


def cotangents(R, weights_shape, dtype, with_weights, seed=2):
    """Random cotangents of the outputs: rgb [R, 3], depth [R], opacity [R],
    weights `weights_shape` ([R, S] or [N]; None without weights)."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(R, 3)).astype(dtype), rng.normal(size=R).astype(dtype),
            rng.normal(size=R).astype(dtype), rng.normal(size=weights_shape).astype(dtype) if with_weights else None)


def render_grads(render, sigma, rgb, background, cot, mode, variables=False):
    """Gradients of <cot, outputs> for sigma, rgb and the background (None
    without one) through render(sigma, rgb, background, return_weights) under
    a GradientTape, eagerly or in a tf.function (mode "function"); the inputs
    as tf.Variables (variables) or watched constants."""
    import tensorflow as tf

    make = tf.Variable if variables else tf.constant
    sigma_v, rgb_v = make(sigma), make(rgb)
    bg_v = None if background is None else make(background)
    with_weights = cot[3] is not None

    def run(sigma_v, rgb_v, bg_v):
        sources = [sigma_v, rgb_v] + ([] if bg_v is None else [bg_v])
        with tf.GradientTape() as tape:
            tape.watch(sources)
            out = render(sigma_v, rgb_v, bg_v, with_weights)
            loss = (tf.reduce_sum(cot[0] * out.rgb) + tf.reduce_sum(cot[1] * out.depth)
                    + tf.reduce_sum(cot[2] * out.opacity))
            if with_weights:
                loss += tf.reduce_sum(cot[3] * out.weights)
        return tape.gradient(loss, sources)

    if mode == "function":
        run = tf.function(run)
    grads = run(sigma_v, rgb_v, bg_v)
    return grads[0].numpy(), grads[1].numpy(), None if bg_v is None else grads[2].numpy()


def grad_tol(dtype):
    """Analytic gradients against central finite differences of the float64 reference."""
    return dict(rtol=2e-4, atol=2e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-6, atol=1e-7)


def assert_grads_close(got, expected, dtype, background):
    """(grad_sigma, grad_rgb, grad_background) against the reference's; the
    background's only when there is one, and shaped like it."""
    tol = grad_tol(dtype)
    np.testing.assert_allclose(got[0], expected[0], **tol)
    np.testing.assert_allclose(got[1], expected[1], **tol)
    if background is not None:
        assert got[2].shape == background.shape
        np.testing.assert_allclose(got[2], expected[2], **tol)


def assert_compute_gradient(theoretical_and_numerical, **tol):
    """tf.test.compute_gradient's two Jacobian lists agree."""
    for th, nu in zip(*theoretical_and_numerical):
        np.testing.assert_allclose(th, nu, **tol)


# The grid of the gradient tests against the reference (CPU kernels).
GRADIENT_GRID = grid(dtype=[np.float32, np.float64], bg=["none", "shared", "per_ray"], eps=[0.0, 1e-2],
                     with_weights=[False, True], mode=["eager", "function"])

# The same through the CUDA harness (dtype by name, no graph mode).
CUDA_GRADIENT_GRID = grid(name=["float32", "float64"], bg_kind=["shared", "per_ray"], eps=[0.0, 1e-2],
                          with_weights=[False, True])
