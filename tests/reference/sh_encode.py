"""Real spherical harmonics (instant-NGP's order and signs), in float64,
written from the formulas, independent of kernels/sh_encode/sh_encode.h.

- `values(dirs, degree)`: the Cartesian polynomials, coefficients computed
  from their closed forms (1 / (2 sqrt(pi)), sqrt(3 / (4 pi)), ...); works on
  complex arrays too.
- `vjp(dirs, grad, degree)`: sum_k grad_k dY_k/d dirs by complex-step
  differentiation of `values` (exact to rounding for polynomials, and shares
  no hand-derived derivative with the kernels).
- `legendre(dirs, degree)`: the textbook definition for unit directions,
  Y_lm = sqrt(2) K_lm P_l^|m|(cos theta) {cos(m phi) | sin(|m| phi)}, P with
  the Condon-Shortley phase, index l (l + 1) + m; checks that `values` are
  spherical harmonics at all.
- `tf_composite(d, degree)`: the composite the op replaces: the same
  polynomials as TF ops in float32, so NaN / inf come out where float32
  arithmetic gives them.
"""
import math

import numpy as np

PI = math.pi
C0 = 1 / (2 * math.sqrt(PI))
C1 = math.sqrt(3 / (4 * PI))
C2 = math.sqrt(15 / (4 * PI))
C3 = 3 * math.sqrt(5 / (16 * PI))
C4 = math.sqrt(5 / (16 * PI))
C5 = math.sqrt(15 / (16 * PI))
C6 = math.sqrt(35 / (32 * PI))
C7 = math.sqrt(105 / (4 * PI))
C8 = math.sqrt(21 / (32 * PI))
C9 = math.sqrt(7 / (16 * PI))
C10 = math.sqrt(105 / (16 * PI))


def polynomials(x, y, z, c0):
    """The 16 polynomials of bands 0-3 in order, from NumPy arrays or TF
    tensors (`c0`: C0 shaped like x)."""
    xx, yy, zz = x * x, y * y, z * z
    return [
        c0,
        -C1 * y, C1 * z, -C1 * x,
        C2 * x * y, -C2 * y * z, C3 * zz - C4, -C2 * x * z, C5 * (xx - yy),
        C6 * y * (yy - 3 * xx), C7 * x * y * z, C8 * y * (1 - 5 * zz), C9 * z * (5 * zz - 3),
        C8 * x * (1 - 5 * zz), C10 * z * (xx - yy), C6 * x * (3 * yy - xx),
    ]


def values(dirs, degree):
    """[..., degree**2] float64 (complex128 for complex dirs)."""
    d = np.asarray(dirs)
    if not np.iscomplexobj(d):
        d = d.astype(np.float64)
    x, y, z = d[..., 0], d[..., 1], d[..., 2]
    return np.stack(polynomials(x, y, z, np.full_like(x, C0))[:degree * degree], axis=-1)


def vjp(dirs, grad, degree, h=1e-20):
    """sum_k grad[..., k] dY_k / d dirs[..., i] -> [..., 3] float64."""
    d = np.asarray(dirs, np.float64)
    g = np.asarray(grad, np.float64)
    out = np.empty(d.shape, np.float64)
    for i in range(3):
        step = np.zeros(3)
        step[i] = h
        out[..., i] = np.sum(g * values(d + 1j * step, degree).imag / h, axis=-1)
    return out


def _assoc_legendre(l, m, t):
    """P_l^m(t), m >= 0, with the Condon-Shortley phase (-1)^m."""
    p_mm = (-1) ** m * math.prod(range(1, 2 * m, 2)) * (1 - t * t) ** (m / 2)
    if l == m:
        return p_mm
    p_prev, p = p_mm, t * (2 * m + 1) * p_mm
    for ll in range(m + 2, l + 1):
        p_prev, p = p, ((2 * ll - 1) * t * p - (ll + m - 1) * p_prev) / (ll - m)
    return p


def legendre(dirs, degree):
    """Textbook real spherical harmonics of unit directions [..., degree**2]."""
    d = np.asarray(dirs, np.float64)
    theta = np.arccos(np.clip(d[..., 2], -1, 1))
    phi = np.arctan2(d[..., 1], d[..., 0])
    out = []
    for l in range(degree):
        for m in range(-l, l + 1):
            a = abs(m)
            k = math.sqrt((2 * l + 1) / (4 * PI) * math.factorial(l - a) / math.factorial(l + a))
            p = _assoc_legendre(l, a, np.cos(theta))
            if m == 0:
                out.append(k * p)
            elif m > 0:
                out.append(math.sqrt(2) * k * p * np.cos(m * phi))
            else:
                out.append(math.sqrt(2) * k * p * np.sin(a * phi))
    return np.stack(out, axis=-1)


def tf_composite(d, degree=4):
    """The composite the op replaces: the polynomials as a stack of TF ops on
    [N, 3] directions (float32 as given, not normalised)."""
    import tensorflow as tf  # here: the CUDA harness tests import this module without TF

    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    return tf.stack(polynomials(x, y, z, tf.fill(tf.shape(x), tf.constant(C0, x.dtype)))[:degree * degree], axis=-1)


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs, and the gradients of sum(cotangent * output) as a function of the
    cotangents."""
    degree = attrs["degree"]
    return [values(inputs[0], degree)], lambda cots: [vjp(inputs[0], cots[0], degree)]
