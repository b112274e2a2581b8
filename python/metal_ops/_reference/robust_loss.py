"""Barron's general robust loss rho(x, alpha, c) (CVPR 2019) and its
derivatives, from the paper's formulas (not from kernels/robust_loss/robust_loss.h):
float64 NumPy with broadcasting, and 50-digit mpmath for the general form.
No TensorFlow: the self-test, the CPU tests, the fuzz tests and the CUDA
harness tests share it.
"""
import numpy as np

INF = float("inf")
# The op's documented cap of rho (docs/ROBUST_LOSS.md): exp(69) in float32.
SATURATION = float(np.float32(np.exp(np.float32(69.0))))


def _broadcast(x, alpha, c):
    return (np.asarray(v, np.float64) for v in np.broadcast_arrays(x, alpha, c))


def rho(x, alpha, c):
    """rho in float64 (the general form written without cancellation, the
    limits at alpha = 0, 2, +-inf), uncapped: +inf where float64 overflows."""
    x, a, c = _broadcast(x, alpha, c)
    z = (x / c) ** 2
    b = np.abs(a - 2)
    with np.errstate(all="ignore"):
        general = b / np.where(a == 0, 1, a) * np.expm1(0.5 * a * np.log1p(z / np.where(b == 0, 1, b)))
        return np.select([a == 0, a == 2, a == -INF, a == INF],
                         [np.log1p(0.5 * z), 0.5 * z, -np.expm1(-0.5 * z), np.expm1(0.5 * z)], general)


def rho_saturated(x, alpha, c):
    """rho capped at SATURATION, as the op returns it."""
    return np.minimum(rho(x, alpha, c), SATURATION)


def drho_dx(x, alpha, c):
    """d rho / dx = x / c^2 (z / |alpha - 2| + 1)^(alpha / 2 - 1) and its limits."""
    x, a, c = _broadcast(x, alpha, c)
    z = (x / c) ** 2
    b = np.where(np.abs(a - 2) == 0, 1, np.abs(a - 2))
    with np.errstate(all="ignore"):
        factor = np.select([a == 2, a == -INF, a == INF], [np.ones_like(z), np.exp(-0.5 * z), np.exp(0.5 * z)],
                           np.exp((0.5 * a - 1) * np.log1p(z / b)))
        return x / c**2 * factor


def grads(x, alpha, c):
    """(d rho/dx, d rho/dalpha, d rho/dc) in float64 for one alpha and c;
    d rho/dalpha by Richardson-extrapolated central differences of rho, with
    steps that stay on one side of 0 and 2 (rho is singular in alpha at 2),
    zero at alpha = 2 and +-inf."""
    x = np.asarray(x, np.float64)
    a = float(alpha)
    dx = drho_dx(x, a, c)
    if np.isinf(a) or a == 2:
        da = np.zeros_like(x)
    else:
        h = min(1e-5, abs(a - 2) / 16, abs(a) / 16 if a != 0 else 1e-5)

        def central(s):
            return (rho(x, a + s, c) - rho(x, a - s, c)) / (2 * s)

        da = (4 * central(h / 2) - central(h)) / 3
    return dx, da, -(x / c) * dx


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): alpha and scale [C]
    along the last axis of x, their gradients summed over the other axes."""
    x, alpha, scale = (np.asarray(v, np.float64) for v in inputs)
    columns = x.reshape(-1, alpha.size)

    def vjp(cots):
        dy = np.asarray(cots[0], np.float64).reshape(columns.shape)
        dx, da, dc = np.zeros(columns.shape), np.zeros(alpha.size), np.zeros(alpha.size)
        for k in range(alpha.size):
            gx, ga, gc = grads(columns[:, k], alpha.flat[k], scale.flat[k])
            dx[:, k], da[k], dc[k] = dy[:, k] * gx, np.sum(dy[:, k] * ga), np.sum(dy[:, k] * gc)
        return [dx.reshape(x.shape), da.reshape(alpha.shape), dc.reshape(scale.shape)]

    return [rho_saturated(x, alpha, scale)], vjp


def closed_form(x, alpha, c):
    """The named special cases alpha in {2, 1, 0, -2, -inf, +inf}, written
    differently from rho() (z / (sqrt(z + 1) + 1), 2z / (z + 4), ...)."""
    z = (np.asarray(x, np.float64) / c) ** 2
    with np.errstate(over="ignore"):
        if alpha == 2:
            return 0.5 * z
        if alpha == 1:
            return z / (np.sqrt(z + 1) + 1)
        if alpha == 0:
            return np.log1p(0.5 * z)
        if alpha == -2:
            return 2 * z / (z + 4)
        if alpha == -INF:
            return -np.expm1(-0.5 * z)
        if alpha == INF:
            return np.expm1(0.5 * z)
    raise ValueError(alpha)


def mp_rho(x, a, c):
    """The general form at mpmath's precision (a not in {0, 2, +-inf})."""
    import mpmath

    x, a, c = (v if isinstance(v, mpmath.mpf) else mpmath.mpf(float(v)) for v in (x, a, c))
    b = abs(a - 2)
    return b / a * (((x / c) ** 2 / b + 1) ** (a / 2) - 1)


def mp_grads(x, a, c):
    """d rho/dx, d rho/dalpha, d rho/dc by mpmath differentiation of mp_rho."""
    import mpmath

    x, a, c = (v if isinstance(v, mpmath.mpf) else mpmath.mpf(float(v)) for v in (x, a, c))
    dx = mpmath.diff(lambda v: mp_rho(v, a, c), x)
    da = mpmath.diff(lambda v: mp_rho(x, v, c), a)
    dc = mpmath.diff(lambda v: mp_rho(x, a, v), c)
    return float(dx), float(da), float(dc)
