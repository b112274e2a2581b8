"""TruncExp (instant-NGP's density activation) from its definition, float64
NumPy, not from kernels/common: y = exp(x), dx = dy * exp(clip(x, -15, 15)).
The CPU tests, the MSL-shim tests, the fuzz tests and the CUDA harness tests
share it (TensorFlow only inside tf_composite)."""
import numpy as np

LIMIT = 15.0  # the gradient's exponent is clipped to [-LIMIT, LIMIT]
# Relative tolerance per dtype, and one step of its subnormal spacing (a
# result in float16's subnormal range keeps fewer than 11 significant bits).
TOL = {np.float32: 2e-6, np.float16: 1e-3}
SUBNORMAL_STEP = {np.float32: 2.0 ** -149, np.float16: 2.0 ** -24}


def forward(x):
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64))


def grad(dy, x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(dy, np.float64) * np.exp(np.clip(np.asarray(x, np.float64), -LIMIT, LIMIT))


def assert_like(got, want, dtype):
    """Same NaN / +inf / -inf positions as the reference rounded to dtype,
    finite values within TOL (and one subnormal step)."""
    with np.errstate(over="ignore"):
        want = np.asarray(want).astype(dtype)  # float16's overflow to inf is the reference's too
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(np.asarray(got)[finite].astype(np.float64), want[finite].astype(np.float64),
                               rtol=TOL[dtype], atol=SUBNORMAL_STEP[dtype])


def tf_composite(x):
    """The composite the op replaces: the tf.custom_gradient a user writes."""
    import tensorflow as tf  # here: the CUDA harness tests import this module without TF

    @tf.custom_gradient
    def trunc_exp(x):
        return tf.exp(x), lambda dy: dy * tf.exp(tf.clip_by_value(x, -LIMIT, LIMIT))

    return trunc_exp(x)


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs, and the gradients of sum(cotangent * output) as a function of the
    cotangents."""
    return [forward(inputs[0])], lambda cots: [grad(cots[0], inputs[0])]
