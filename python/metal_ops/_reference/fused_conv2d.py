"""MetalOpsFusedConv2D's reference: act(conv2d(x, w) + b + r) in float64 NumPy.

The convolution is a direct loop over filter taps written from the definition
out[n, i, j, o] = sum_{di, dj, c} xpad[n, i*s + di*d, j*s + dj*d, c] * w[di, dj, c, o]
with TensorFlow's SAME / VALID padding rule; the activations (and their
derivatives) are written from their textbook formulas, not from
kernels/common/activations.h (those FusedMLP has too are its reference's).
The gradients of x and w run the same taps backwards. No TensorFlow: the
self-test, the CPU tests and the CUDA harness tests share it.
"""
import numpy as np

from . import fused_mlp as mlp_ref

# The activations FusedMLP has too: its reference's formulas (fused_mlp.py).
MLP_ACTIVATIONS = ("none", "relu", "leaky_relu", "sigmoid")


def _pads(in_size, k, stride, dil, padding):
    keff = (k - 1) * dil + 1
    if padding == "VALID":
        out = (in_size - keff) // stride + 1
        return out, 0, 0
    out = -(-in_size // stride)
    total = max((out - 1) * stride + keff - in_size, 0)
    return out, total // 2, total - total // 2


def _geometry(x, w, strides, padding, dilations):
    """(output height, width, (top, bottom), (left, right))."""
    _, h, wd, _ = x.shape
    kh, kw = w.shape[:2]
    if isinstance(padding, str):
        oh, pt, pb = _pads(h, kh, strides[0], dilations[0], padding)
        ow, pl, pr = _pads(wd, kw, strides[1], dilations[1], padding)
    else:
        (pt, pb), (pl, pr) = padding
        oh = (h + pt + pb - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
        ow = (wd + pl + pr - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
    return oh, ow, (pt, pb), (pl, pr)


def _taps(w, oh, ow, strides, dilations):
    """(di, dj, the window of the padded input that tap multiplies)."""
    for di in range(w.shape[0]):
        for dj in range(w.shape[1]):
            r0, c0 = di * dilations[0], dj * dilations[1]
            yield di, dj, (slice(None), slice(r0, r0 + strides[0] * (oh - 1) + 1, strides[0]),
                           slice(c0, c0 + strides[1] * (ow - 1) + 1, strides[1]), slice(None))


def ref_conv(x, w, strides, padding, dilations):
    oh, ow, rows, cols = _geometry(x, w, strides, padding, dilations)
    xp = np.pad(x.astype(np.float64), ((0, 0), rows, cols, (0, 0)))
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]), np.float64)
    for di, dj, window in _taps(w, oh, ow, strides, dilations):
        out += np.einsum("nhwc,co->nhwo", xp[window], w[di, dj].astype(np.float64))
    return out


def ref_conv_grads(x, w, dz, strides, padding, dilations):
    """(d x, d w) of sum(dz * ref_conv(x, w)): each tap's product run backwards."""
    oh, ow, rows, cols = _geometry(x, w, strides, padding, dilations)
    xp = np.pad(x.astype(np.float64), ((0, 0), rows, cols, (0, 0)))
    dxp, dw = np.zeros_like(xp), np.zeros(w.shape)
    for di, dj, window in _taps(w, oh, ow, strides, dilations):
        dxp[window] += np.einsum("nhwo,co->nhwc", dz, w[di, dj].astype(np.float64))
        dw[di, dj] = np.einsum("nhwc,nhwo->co", xp[window], dz)
    return dxp[:, rows[0]:rows[0] + x.shape[1], cols[0]:cols[0] + x.shape[2]], dw


def ref_act(z, act, alpha=0.2):
    if act is None or act in MLP_ACTIVATIONS:
        return mlp_ref.act(z, act or "none", alpha)
    if act == "relu6":
        return np.minimum(np.maximum(z, 0), 6)
    if act == "elu":
        return np.where(z > 0, z, np.exp(np.minimum(z, 0)) - 1)
    if act == "tanh":
        return np.tanh(z)
    if act == "swish":
        return z / (1 + np.exp(-z))
    raise ValueError(act)


def reference(x, w, b=None, r=None, strides=(1, 1), padding="SAME", dilations=(1, 1), act=None, alpha=0.2):
    z = ref_conv(x, w, strides, padding, dilations)
    if b is not None:
        z = z + b
    if r is not None:
        z = z + r
    return ref_act(z, act, alpha)


def ref_act_grad(z, act, alpha=0.2):
    """d act / d z at the pre-activation z (TensorFlow's conventions at the kinks:
    0 at z == 0 for relu / relu6, 0 at relu6's upper bound, alpha at 0 for leaky_relu)."""
    z = np.asarray(z, np.float64)
    if act is None or act in MLP_ACTIVATIONS:
        return mlp_ref.dact(z, act or "none", alpha)
    if act == "relu6":
        return ((z > 0) & (z < 6)).astype(np.float64)
    if act == "elu":
        return np.where(z > 0, 1.0, np.exp(np.minimum(z, 0)))
    if act == "tanh":
        return 1 - np.tanh(z) ** 2
    if act == "swish":
        s = 1 / (1 + np.exp(-z))
        return s * (1 + z * (1 - s))
    raise ValueError(act)


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): x, filters, bias and
    residual, stride 1, SAME padding, the activation in `attrs`."""
    x, w, b, r = (np.asarray(v, np.float64) for v in inputs)
    act, geometry = attrs["activation"], ((1, 1), "SAME", (1, 1))
    z = ref_conv(x, w, *geometry) + b + r

    def grads(cots):
        dz = np.asarray(cots[0], np.float64) * ref_act_grad(z, act)
        return list(ref_conv_grads(x, w, dz, *geometry)) + [dz.sum(axis=(0, 1, 2)), dz]

    return [ref_act(z, act)], grads
