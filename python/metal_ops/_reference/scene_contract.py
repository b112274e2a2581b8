"""SceneContract (mip-NeRF 360's contraction, Barron et al. 2022, eq. 10) from
its definition, float64 NumPy, not from kernels/common:

    contract(x) = x                          if ||x|| <= 1
                  (2 - 1 / ||x||) x / ||x||  otherwise

with ||.|| the L2 or the L-infinity norm of the last axis (3 coordinates).

- `forward(x, norm)`: the formula; a point with an infinite coordinate (and no
  NaN) is its limit along the infinite coordinates, one with a NaN is NaN.
- `vjp(x, grad, norm)`: sum_i grad_i d contract_i / d x by complex-step
  differentiation of the formula (the L-infinity norm as sign(x_k) x_k for the
  first k of max |x_k|), sharing no hand-derived derivative with the kernels;
  0 at infinite points, NaN at NaN ones.
- `tf_composite(x, norm)`: the TensorFlow ops a user writes instead.
The CPU tests, the MSL-shim tests, the fuzz tests and the CUDA harness tests
share it (TensorFlow only inside tf_composite).
"""
import numpy as np

NORMS = ("l2", "linf")
# Tolerances of a float32 / float16 result (computed in float32).
ATOL = {np.float32: 2e-6, np.float16: 2e-3}


def _norm(x, norm):
    """||x|| over the last axis; complex x: the analytic continuation."""
    if norm == "l2":
        return np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    k = np.argmax(np.abs(x.real), axis=-1)[..., None]
    xk = np.take_along_axis(x, k, axis=-1)
    return np.where(xk.real < 0, -xk, xk)


def _formula(x, norm):
    r = _norm(x, norm)
    outside = r.real > 1
    safe = np.where(outside, r, 1.0)
    return np.where(outside, (2 - 1 / safe) * x / safe, x)


def _bad_points(x):
    """Masks [...]: a NaN coordinate; an infinite one and no NaN."""
    nan = np.isnan(x).any(axis=-1)
    return nan, np.isinf(x).any(axis=-1) & ~nan


def forward(x, norm="l2"):
    """[..., 3] float64."""
    x = np.asarray(x, np.float64)
    nan, inf = _bad_points(x)
    finite = np.where((nan | inf)[..., None], 0.0, x)
    out = _formula(finite, norm)
    limit = np.where(np.isinf(x), np.sign(x), 0.0)  # the direction at infinity, ||limit|| = 1 after division
    limit = 2 * limit / np.where(inf[..., None], _norm(limit, norm), 1.0)
    out = np.where(inf[..., None], limit, out)
    return np.where(nan[..., None], np.nan, out)


def vjp(x, grad, norm="l2", h=1e-30):
    """sum_i grad[..., i] d contract_i / d x[..., j] -> [..., 3] float64."""
    x = np.asarray(x, np.float64)
    g = np.asarray(grad, np.float64)
    nan, inf = _bad_points(x)
    finite = np.where((nan | inf)[..., None], 0.0, x)
    out = np.empty(x.shape, np.float64)
    for j in range(3):
        step = np.zeros(3)
        step[j] = h
        with np.errstate(invalid="ignore"):
            out[..., j] = np.sum(g * _formula(finite + 1j * step, norm).imag / h, axis=-1)
    out = np.where(inf[..., None], 0.0 * g, out)
    return np.where(nan[..., None], np.nan, out)


def assert_like(got, want, dtype):
    """NaN where the reference is NaN, elsewhere within ATOL (outputs lie in [-2, 2];
    gradients scale with the upstream gradient, which the tests keep near 1)."""
    got = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=ATOL[dtype], atol=ATOL[dtype])


def tf_composite(x, norm="l2"):
    """What a user writes without the op (nerfstudio's SceneContraction):
    tf.where of the two branches, the norm kept >= 1 in the untaken branch so
    that the gradient at the origin is not NaN."""
    import tensorflow as tf  # here: the CUDA harness tests import this module without TF

    r = tf.norm(x, ord=2 if norm == "l2" else np.inf, axis=-1, keepdims=True)
    safe = tf.maximum(r, 1.0)
    return tf.where(r <= 1.0, x, (2.0 - 1.0 / safe) * x / safe)


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs, and the gradients of sum(cotangent * output) as a function of the
    cotangents."""
    norm = attrs["norm"]
    return [forward(inputs[0], norm)], lambda cots: [vjp(inputs[0], cots[0], norm)]
