"""TruncExp (instant-NGP's density activation) from its definition, float64
NumPy, not from kernels/common: y = exp(x), dx = dy * exp(clip(x, -15, 15)).
The CPU tests, the MSL-shim tests, the fuzz tests and the CUDA harness tests
share it (TensorFlow only inside tf_composite)."""
import numpy as np

LIMIT = 15.0  # the gradient's exponent is clipped to [-LIMIT, LIMIT]


def forward(x):
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64))


def grad(dy, x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(dy, np.float64) * np.exp(np.clip(np.asarray(x, np.float64), -LIMIT, LIMIT))


def tf_composite(x):
    """The composite the op replaces: the tf.custom_gradient a user writes."""
    import tensorflow as tf  # here: the CUDA harness tests import this module without TF

    @tf.custom_gradient
    def trunc_exp(x):
        return tf.exp(x), lambda dy: dy * tf.exp(tf.clip_by_value(x, -LIMIT, LIMIT))

    return trunc_exp(x)
