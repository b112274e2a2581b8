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


def dact_from_output(y, name, alpha=ALPHA):
    """d act / d z from the output y = act(z) (how the kernels take it)."""
    if name in ("relu", "leaky_relu"):
        return np.where(y > 0, 1.0, 0.0 if name == "relu" else alpha)
    if name == "sigmoid":
        return y * (1 - y)
    if name == "softplus":
        return -np.expm1(-y)
    if name == "trunc_exp":
        return np.clip(y, 1.0 / TRUNC_EXP_LIMIT, TRUNC_EXP_LIMIT)
    if name == "none":
        return np.ones_like(y)
    raise ValueError(name)


def forward_backward(x, ws, bs, dy, act_name, out_act, outs=None):
    """float64 forward and backward of the Dense stack: (y, dx, dws, dbs,
    hidden). With `outs` (a kernel's layer outputs: its hidden layers, then
    y), derivatives are taken at those outputs: at a relu kink (z within
    rounding of 0) the gradient legitimately follows the side the kernel's
    forward landed on, so the reference must take the same side."""
    h = [np.asarray(x, np.float64)]
    zs = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        z = h[-1] @ np.asarray(w, np.float64) + np.asarray(b, np.float64)
        zs.append(z)
        h.append(act(z, out_act if i == len(ws) - 1 else act_name))
    g = np.asarray(dy, np.float64)
    dws, dbs = [None] * len(ws), [None] * len(ws)
    for i in reversed(range(len(ws))):
        name = out_act if i == len(ws) - 1 else act_name
        g = g * (dact(zs[i], name) if outs is None else dact_from_output(np.asarray(outs[i], np.float64), name))
        dws[i] = h[i].T @ g
        dbs[i] = g.sum(0)
        g = g @ np.asarray(ws[i], np.float64).T
    return h[-1], g, dws, dbs, h[1:-1]
