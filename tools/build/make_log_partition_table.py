"""Builds python/metal_ops/data/robust_loss_log_partition.npz: log Z(alpha) of
Barron's robust loss as a density, on a uniform alpha grid over [0, 2], with
d log Z / d alpha, for cubic Hermite interpolation in metal_ops.losses.

  Z(alpha) = integral over R of exp(-rho(x, alpha, 1)) dx
  rho(x, a, 1) = |a-2|/a * ((x^2/|a-2| + 1)^(a/2) - 1)

Our own numerical integration, no downloads: with x = exp(v) the half-line
integral becomes the integral over R of exp(-rho(e^v)) e^v dv, an analytic
integrand decaying exponentially at both ends, for which the trapezoid rule
converges geometrically (error ~ exp(-2 pi d / h), d = pi/2 here). The
derivative uses the complex step (rho is analytic in alpha on [0, 2)); at
alpha = 2 the slope of log Z is infinite (d rho / d alpha grows like
log(1/|alpha-2|)), so the table stores the secant slope of the last interval
there. tests/test_losses_keras.py checks the table against mpmath quadrature.

Usage: python tools/build/make_log_partition_table.py [--points 2049] [--out PATH]
"""
import argparse
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "python", "metal_ops", "data", "robust_loss_log_partition.npz")


def rho(x2, a):
    """rho(x, a, 1) with x2 = x^2, for a in [0, 2) (real or complex a)."""
    if np.isscalar(a) and a == 0:
        return np.log1p(0.5 * x2)
    b = 2.0 - a
    return (b / a) * np.expm1(0.5 * a * np.log1p(x2 / b))


def log_partition(alphas, h=0.01, v_lo=-40.0, v_hi=90.0):
    v = np.arange(v_lo, v_hi + h / 2, h)
    x = np.exp(v)
    x2 = x * x
    values, slopes = [], []
    step = 1e-30
    for a in alphas:
        if a == 2.0:
            f = np.exp(-0.5 * x2) * x
            z = 2.0 * h * f.sum()
            values.append(np.log(z))
            slopes.append(np.nan)
            continue
        r = rho(x2, a)
        f = np.exp(-r) * x
        z = 2.0 * h * f.sum()
        # complex step: d rho / d a = Im(rho(a + i step)) / step
        drho = np.imag(rho(x2, a + 1j * step)) / step
        dz = -2.0 * h * (f * drho).sum()
        values.append(np.log(z))
        slopes.append(dz / z)
    return np.array(values), np.array(slopes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=2049)
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    alphas = np.linspace(0.0, 2.0, args.points)
    values, slopes = log_partition(alphas)
    slopes[-1] = (values[-1] - values[-2]) / (alphas[-1] - alphas[-2])  # secant at alpha = 2
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    np.savez(args.out, alpha=alphas.astype(np.float64), log_z=values, dlog_z=slopes)
    print(f"wrote {args.out}: {args.points} points, log Z(0) = {values[0]:.12f} "
          f"(pi sqrt 2: {np.log(np.pi * np.sqrt(2)):.12f}), log Z(2) = {values[-1]:.12f} "
          f"(sqrt(2 pi): {0.5 * np.log(2 * np.pi):.12f})")


if __name__ == "__main__":
    main()
