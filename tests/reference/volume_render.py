"""NumPy float64 reference for VolumeRender, written from the formulas
(docs/VOLUME_RENDER.md), not from the kernels. Shared by tests/test_volume_render.py
and tests/cuda/test_volume_render_cuda.py (which runs without TensorFlow).

The gradient reference is a central finite difference of this float64
forward, so it is independent of the analytic (suffix-trick) backward.
"""
import numpy as np


def render(sigma, rgb, t, background=None, early_termination=1e-4):
    """Returns (rgb [R,3], depth [R], opacity [R], weights [R,S]) in float64."""
    sigma = np.asarray(sigma, np.float64)
    rgb = np.asarray(rgb, np.float64)
    t = np.asarray(t, np.float64)
    R, S = sigma.shape
    delta = t[:, 1:] - t[:, :-1]
    mid = 0.5 * (t[:, 1:] + t[:, :-1])
    tau = sigma * delta
    cum = np.concatenate([np.zeros((R, 1)), np.cumsum(tau, axis=1)[:, :-1]], axis=1)  # exclusive
    trans = np.exp(-cum)
    alpha = 1.0 - np.exp(-tau)
    weights = trans * alpha
    # Early termination: a sample is skipped once the transmittance in front of
    # it is below the threshold (T is non-increasing, so the skipped set is a suffix).
    weights = np.where(trans < early_termination, 0.0, weights)
    opacity = weights.sum(axis=1)
    out = (weights[..., None] * rgb).sum(axis=1)
    if background is not None:
        bg = np.broadcast_to(np.asarray(background, np.float64), (R, 3))
        out = out + bg * (1.0 - opacity)[:, None]
    depth = (weights * mid).sum(axis=1)
    return out, depth, opacity, weights


def loss(sigma, rgb, t, background, early_termination, cot):
    """Scalar <cot, outputs> with cotangents cot = (c_rgb, c_depth, c_opacity, c_weights or None)."""
    out, depth, opacity, weights = render(sigma, rgb, t, background, early_termination)
    value = np.sum(cot[0] * out) + np.sum(cot[1] * depth) + np.sum(cot[2] * opacity)
    if cot[3] is not None:
        value += np.sum(cot[3] * weights)
    return value


def numeric_grads(sigma, rgb, t, background, early_termination, cot, eps=1e-6):
    """Central differences of `loss` w.r.t. sigma, rgb and background (float64)."""
    sigma = np.array(sigma, np.float64)
    rgb = np.array(rgb, np.float64)
    bg = None if background is None else np.array(background, np.float64)

    def diff(array, setter):
        grad = np.zeros_like(array)
        flat = array.reshape(-1)
        g = grad.reshape(-1)
        for k in range(flat.size):
            keep = flat[k]
            flat[k] = keep + eps
            up = setter()
            flat[k] = keep - eps
            down = setter()
            flat[k] = keep
            g[k] = (up - down) / (2 * eps)
        return grad

    def f():
        return loss(sigma, rgb, t, bg, early_termination, cot)

    g_sigma = diff(sigma, f)
    g_rgb = diff(rgb, f)
    g_bg = None if bg is None else diff(bg, f)
    return g_sigma, g_rgb, g_bg


def make_rays(R, S, seed=0, dtype=np.float32, sigma_scale=2.0, near=2.0, far=6.0, surface=False):
    """Random rays: sorted t in [near, far] (with some zero-width intervals),
    sigma in [0, sigma_scale) (with exact zeros), colours in [0, 1)."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(near, far, size=(R, S + 1)), axis=1)
    if S >= 3:
        t[:, 2] = t[:, 1]  # a zero-width interval
    sigma = rng.uniform(0.0, sigma_scale, size=(R, S))
    if S >= 2:
        sigma[:, 0] = 0.0
    if surface and S >= 4:
        # An opaque surface part-way along each ray, so early termination fires.
        hit = rng.integers(1, S - 1, size=R)
        sigma[np.arange(R), hit] = 200.0
    rgb = rng.uniform(0.0, 1.0, size=(R, S, 3))
    return sigma.astype(dtype), rgb.astype(dtype), t.astype(dtype)


def rays_clear_of_threshold(sigma, t, early_termination, margin=1e-3):
    """Per ray: True when none of its transmittances lies within a factor
    exp(+-margin) of the threshold (so float32 and float64 agree on K)."""
    if early_termination == 0:
        return np.ones(np.shape(sigma)[0], bool)
    sigma = np.asarray(sigma, np.float64)
    t = np.asarray(t, np.float64)
    tau = sigma * (t[:, 1:] - t[:, :-1])
    cum = np.concatenate([np.zeros((sigma.shape[0], 1)), np.cumsum(tau, axis=1)[:, :-1]], axis=1)
    with np.errstate(divide="ignore"):
        log_ratio = -cum - np.log(early_termination)
    return np.all(np.abs(log_ratio) > margin, axis=1)


def margin_ok(sigma, t, early_termination, margin=1e-3):
    """True when no transmittance lies within a factor exp(±margin) of the
    threshold in log space (finite differences and float32 then agree on which samples run)."""
    return bool(np.all(rays_clear_of_threshold(sigma, t, early_termination, margin)))
