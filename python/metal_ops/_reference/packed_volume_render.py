"""NumPy float64 reference for PackedVolumeRender, written from the formulas
(docs/PACKED_VOLUME_RENDER.md), ray by ray over the packed layout, not from the
kernels. The self-test, the TF tests, the MSL-shim test and the CUDA harness
tests (which run without TensorFlow) share it.

Gradients: `numeric_grads`, central finite differences of this float64
forward (the tests' reference), and `vjp`, VolumeRender's derivative from the
formulas on the rays padded to one length (the self-test's; the tests check
it against `numeric_grads`).
"""
import numpy as np

from .volume_render import interval_vjp


def ray_slices(offsets, counts):
    return [slice(int(o), int(o) + int(c)) for o, c in zip(offsets, counts)]


def render(sigma, rgb, t_starts, t_ends, offsets, counts, background=None, early_termination=1e-4):
    """Returns (rgb [R,3], depth [R], opacity [R], weights [N]) in float64."""
    sigma = np.asarray(sigma, np.float64)
    rgb = np.asarray(rgb, np.float64).reshape(-1, 3)
    t0 = np.asarray(t_starts, np.float64)
    t1 = np.asarray(t_ends, np.float64)
    R = len(offsets)
    out = np.zeros((R, 3))
    depth = np.zeros(R)
    opacity = np.zeros(R)
    weights = np.zeros(sigma.shape[0])
    for r, s in enumerate(ray_slices(offsets, counts)):
        tau = sigma[s] * (t1[s] - t0[s])
        # Exclusive sum, not cumsum - tau: that cancels to 0 after a huge tau.
        trans = np.exp(-np.concatenate([[0.0], np.cumsum(tau)])[:-1])
        w = trans * (1.0 - np.exp(-tau))
        # Skipped from the first sample whose transmittance is below the threshold.
        w = np.where(trans < early_termination, 0.0, w)
        weights[s] = w
        out[r] = (w[:, None] * rgb[s]).sum(axis=0)
        depth[r] = (w * 0.5 * (t0[s] + t1[s])).sum()
        opacity[r] = w.sum()
    if background is not None:
        out = out + np.broadcast_to(np.asarray(background, np.float64), (R, 3)) * (1.0 - opacity)[:, None]
    return out, depth, opacity, weights


def vjp(sigma, rgb, t_starts, t_ends, offsets, counts, background, early_termination, cot):
    """Gradients of `loss` w.r.t. sigma, rgb and background (None without one):
    each ray's samples in a row of [R, max count], padded with samples of zero
    length (zero weight, no change of transmittance)."""
    counts = np.asarray(counts, np.int64)
    rays, width = len(counts), int(counts.max(initial=0))
    ray = np.repeat(np.arange(rays), counts)
    col = np.arange(len(ray)) - np.repeat(np.asarray(offsets, np.int64), counts)
    t0, t1 = np.asarray(t_starts, np.float64), np.asarray(t_ends, np.float64)

    def dense(values, *tail):
        out = np.zeros((rays, width) + tail)
        out[ray, col] = values
        return out

    weights = None if cot[3] is None else dense(cot[3])
    d_sigma, d_rgb, d_bg = interval_vjp(dense(sigma), dense(np.reshape(rgb, (-1, 3)), 3), dense(t1 - t0),
                                        dense(0.5 * (t0 + t1)), background, early_termination,
                                        list(cot[:3]) + [weights])
    return d_sigma[ray, col], d_rgb[ray, col].reshape(np.shape(rgb)), d_bg


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): a black background, the
    op's default early termination, no gradient for the intervals and layout."""
    outs = list(render(*inputs))[:4 if attrs["return_weights"] else 3]

    def grads(cots):
        d_sigma, d_rgb, _ = vjp(*inputs, None, 1e-4, list(cots) + [None] * (4 - len(cots)))
        return [d_sigma, d_rgb, None, None, None, None]

    return outs, grads


def loss(sigma, rgb, t_starts, t_ends, offsets, counts, background, early_termination, cot):
    """Scalar <cot, outputs> with cotangents cot = (c_rgb, c_depth, c_opacity, c_weights or None)."""
    out, depth, opacity, weights = render(sigma, rgb, t_starts, t_ends, offsets, counts, background,
                                          early_termination)
    value = np.sum(cot[0] * out) + np.sum(cot[1] * depth) + np.sum(cot[2] * opacity)
    if cot[3] is not None:
        value += np.sum(cot[3] * weights)
    return value


def numeric_grads(sigma, rgb, t_starts, t_ends, offsets, counts, background, early_termination, cot, eps=1e-6):
    """Central differences of `loss` w.r.t. sigma, rgb and background (float64)."""
    sigma = np.array(sigma, np.float64)
    rgb = np.array(rgb, np.float64)
    bg = None if background is None else np.array(background, np.float64)

    def diff(array):
        grad = np.zeros_like(array)
        flat, g = array.reshape(-1), grad.reshape(-1)
        for k in range(flat.size):
            keep = flat[k]
            flat[k] = keep + eps
            up = loss(sigma, rgb, t_starts, t_ends, offsets, counts, bg, early_termination, cot)
            flat[k] = keep - eps
            down = loss(sigma, rgb, t_starts, t_ends, offsets, counts, bg, early_termination, cot)
            flat[k] = keep
            g[k] = (up - down) / (2 * eps)
        return grad

    return diff(sigma), diff(rgb), None if bg is None else diff(bg)


def make_packed(counts, seed=0, dtype=np.float32, sigma_scale=2.0, surface=False, near=2.0, far=6.0):
    """Random packed samples for the given per-ray counts: sorted intervals in
    [near, far] with gaps between them (as ray marching skips empty cells) and
    some zero-width ones, sigma in [0, sigma_scale) with exact zeros, colours in
    [0, 1). Returns sigma, rgb, t_starts, t_ends, offsets, counts."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, np.int32)
    offsets = (np.cumsum(counts) - counts).astype(np.int32)
    N = int(counts.sum())
    t_starts = np.zeros(N)
    t_ends = np.zeros(N)
    sigma = rng.uniform(0.0, sigma_scale, size=N)
    for o, c in zip(offsets, counts):
        edges = np.sort(rng.uniform(near, far, size=2 * c))
        t_starts[o:o + c] = edges[0::2]
        t_ends[o:o + c] = edges[1::2]
        if c >= 3:
            t_ends[o + 1] = t_starts[o + 1]  # a zero-width interval
            sigma[o] = 0.0
        if surface and c >= 4:
            sigma[o + rng.integers(1, c - 1)] = 200.0  # an opaque surface, so early termination fires
    rgb = rng.uniform(0.0, 1.0, size=(N, 3))
    return (sigma.astype(dtype), rgb.astype(dtype), t_starts.astype(dtype), t_ends.astype(dtype), offsets, counts)


def margin_ok(sigma, t_starts, t_ends, offsets, counts, early_termination, margin=1e-3):
    """True when no transmittance lies within a factor exp(+-margin) of the
    threshold (float32, float64 and finite differences then agree on which
    samples are used)."""
    if early_termination == 0:
        return True
    sigma = np.asarray(sigma, np.float64)
    tau = sigma * (np.asarray(t_ends, np.float64) - np.asarray(t_starts, np.float64))
    for s in ray_slices(offsets, counts):
        cum = np.concatenate([[0.0], np.cumsum(tau[s])])[:-1]
        if np.any(np.abs(-cum - np.log(early_termination)) <= margin):
            return False
    return True
