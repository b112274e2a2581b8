"""FusedMLP's activations and their derivatives in float64 (written from the
definitions, not from kernels/common/activations.h), shared by the TF tests
and the CUDA harness tests."""
import numpy as np

ALPHA = 0.2  # the op's default leaky_relu slope
TRUNC_EXP_LIMIT = np.exp(15.0)  # trunc_exp's gradient is exp(clip(z, -15, 15))


def act(z, name, alpha=ALPHA):
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "leaky_relu":
        return np.where(z > 0, z, alpha * z)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "softplus":
        return np.logaddexp(0.0, z)
    if name == "trunc_exp":
        return np.exp(z)
    if name == "none":
        return z
    raise ValueError(name)


def dact(z, name, alpha=ALPHA):
    """d act / d z at the pre-activation z."""
    if name == "relu":
        return (z > 0).astype(np.float64)
    if name == "leaky_relu":
        return np.where(z > 0, 1.0, alpha)
    if name == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-z))
        return s * (1.0 - s)
    if name == "softplus":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "trunc_exp":
        return np.exp(np.clip(z, -15.0, 15.0))
    if name == "none":
        return np.ones_like(z)
    raise ValueError(name)
