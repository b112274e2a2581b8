"""NumPy float64 reference for VolumeRender, written from the formulas
(docs/VOLUME_RENDER.md), not from the kernels. The self-test, the TF tests and
the CUDA harness tests (which run without TensorFlow) share it.

Gradients: `numeric_grads`, central finite differences of this float64
forward (the tests' reference, independent of any analytic backward), and
`vjp`, the derivative written out from the formulas (the self-test's, fast
enough for its large cases; the tests check it against `numeric_grads`).
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


def vjp(sigma, rgb, t, background, early_termination, cot):
    """Gradients of `loss` w.r.t. sigma, rgb and background (None without one)."""
    t = np.asarray(t, np.float64)
    return interval_vjp(sigma, rgb, t[:, 1:] - t[:, :-1], 0.5 * (t[:, 1:] + t[:, :-1]), background,
                        early_termination, cot)


def interval_vjp(sigma, rgb, delta, mid, background, early_termination, cot):
    """`vjp` for samples of lengths delta [R, S] and midpoints mid [R, S]
    (PackedVolumeRender's too), from the formulas: with e_i = dL/dw_i (rgb's
    cotangent . c_i + depth's m_i + opacity's + weights', less rgb's .
    background), w_i = T_i (1 - exp(-tau_i)) and T_k = exp(-sum_{j<k} tau_j),
    dL/dtau_i = e_i T_i exp(-tau_i) - sum_{k>i} e_k w_k over the samples not
    skipped, and dL/dsigma_i = dL/dtau_i delta_i."""
    sigma = np.asarray(sigma, np.float64)
    rgb = np.asarray(rgb, np.float64)
    tau = sigma * delta
    cum = np.zeros_like(tau)  # exclusive sums (not cumsum - tau: that cancels after a huge tau)
    cum[:, 1:] = np.cumsum(tau, axis=1)[:, :-1]
    trans = np.exp(-cum)
    live = trans >= early_termination
    weights = np.where(live, trans * -np.expm1(-tau), 0.0)
    c_rgb, c_depth, c_opacity = (np.asarray(c, np.float64) for c in cot[:3])
    e = np.einsum("rc,rsc->rs", c_rgb, rgb) + c_depth[:, None] * mid + c_opacity[:, None]
    if cot[3] is not None:
        e = e + cot[3]
    d_bg = None
    if background is not None:
        e = e - np.sum(c_rgb * np.broadcast_to(np.asarray(background, np.float64), c_rgb.shape), axis=1)[:, None]
        d_bg = c_rgb * (1.0 - weights.sum(axis=1))[:, None]
        if np.ndim(background) == 1:
            d_bg = d_bg.sum(axis=0)
    ew = e * weights
    behind = np.cumsum(ew[:, ::-1], axis=1)[:, ::-1] - ew  # sum over k > i
    d_tau = np.where(live, e * trans * np.exp(-tau), 0.0) - behind
    return d_tau * delta, weights[..., None] * c_rgb[:, None, :], d_bg


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): a black background, the
    op's default early termination, no gradient for t."""
    sigma, rgb, t = inputs
    outs = list(render(sigma, rgb, t))[:4 if attrs["return_weights"] else 3]

    def grads(cots):
        d_sigma, d_rgb, _ = vjp(sigma, rgb, t, None, 1e-4, list(cots) + [None] * (4 - len(cots)))
        return [d_sigma, d_rgb, None]

    return outs, grads


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
