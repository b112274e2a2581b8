"""3D Gaussian splatting's tile binning and rasterization in float64, NumPy
only, written from the definitions (Kerbl et al. 2023; gsplat's
`isect_tiles` and `rasterize_to_pixels`, classic mode), independent of
kernels/gaussian_rasterize/gaussian_rasterize.h.

- `tile_bin`: the binning's reference (python/metal_ops/_reference/gaussian_tile_bin.py),
  which the tests use to feed the rasterizer.
- `rasterize(...)`: image [H, W, C], alpha [H, W] and last_ids [H, W] (one
  past the last composited intersection), tile by tile with the whole tile's
  pixels at once: every alpha as a matrix [pixels, Gaussians], the
  transmittances as cumulative products.
- `vjp(...)`: the gradients of sum(v_image * image) + sum(v_alpha * alpha)
  w.r.t. means2d, conics, colors, opacities and background, from the same
  matrices: the derivative of each pixel's sum over its composited
  Gaussians, the colour behind each one a suffix sum (no reverse walk).
"""
import numpy as np

from .gaussian_tile_bin import tile_bin  # noqa: F401 (re-exported for the tests)

ALPHA_MAX = 0.99
ALPHA_MIN = 1 / 255
TRANSMITTANCE_MIN = 1e-4


def tiles_of(width, height, tile_size):
    """(tiles_x, tiles_y)."""
    return -(-width // tile_size), -(-height // tile_size)


def _tiles(width, height, tile_size):
    """(tile id, rows, columns) of each tile's pixels."""
    tiles_x, tiles_y = tiles_of(width, height, tile_size)
    for ty in range(tiles_y):
        for tx in range(tiles_x):
            rows = np.arange(ty * tile_size, min((ty + 1) * tile_size, height))
            cols = np.arange(tx * tile_size, min((tx + 1) * tile_size, width))
            yield ty * tiles_x + tx, rows, cols


def _tile(means2d, conics, opacities, ids, rows, cols):
    """A tile's matrices [P, K] (P pixels row-major, K its Gaussians):
    dx, dy, exp(-sigma), alpha (0 where skipped), whether alpha is clamped,
    whether composited, and T before each Gaussian."""
    jj, ii = np.meshgrid(cols, rows)
    px, py = jj.reshape(-1, 1) + 0.5, ii.reshape(-1, 1) + 0.5
    m, q, o = means2d[ids], conics[ids], opacities[ids]
    dx, dy = m[None, :, 0] - px, m[None, :, 1] - py
    sigma = 0.5 * (q[None, :, 0] * dx ** 2 + q[None, :, 2] * dy ** 2) + q[None, :, 1] * dx * dy
    with np.errstate(over="ignore", invalid="ignore"):
        vis = np.exp(-sigma)
        raw = o[None, :] * vis
    alpha = np.minimum(raw, ALPHA_MAX)
    used = (sigma >= 0) & (alpha >= ALPHA_MIN)
    alpha = np.where(used, alpha, 0.0)
    after = np.cumprod(1 - alpha, axis=1)
    before = np.concatenate([np.ones((after.shape[0], 1)), after[:, :-1]], axis=1)
    stops = used & (after <= TRANSMITTANCE_MIN)
    k = alpha.shape[1]
    first_stop = np.where(stops.any(axis=1), np.argmax(np.c_[stops, np.ones((len(stops), 1), bool)], axis=1), k)
    composited = used & (np.arange(k)[None, :] < first_stop[:, None])
    alpha = np.where(composited, alpha, 0.0)
    return dx, dy, vis, alpha, raw > ALPHA_MAX, composited, before


def rasterize(means2d, conics, colors, opacities, background, gaussian_ids, tile_ranges, width, height,
              tile_size=16):
    """image [H, W, C], alpha [H, W], last_ids [H, W] (int32)."""
    means2d, conics, colors, opacities, background = (np.asarray(a, np.float64) for a in
                                                      (means2d, conics, colors, opacities, background))
    ids, ranges = np.asarray(gaussian_ids, np.int64), np.asarray(tile_ranges, np.int64)
    c = colors.shape[1]
    image = np.zeros((height, width, c))
    alpha_out = np.zeros((height, width))
    last = np.zeros((height, width), np.int32)
    for tile, rows, cols in _tiles(width, height, tile_size):
        start, end = ranges[tile]
        tid = ids[start:end]
        _, _, _, alpha, _, composited, before = _tile(means2d, conics, opacities, tid, rows, cols)
        t_final = np.prod(1 - alpha, axis=1)
        # only the composited Gaussians' colours count (an inf colour elsewhere is never read)
        weighted = np.where(composited[:, :, None], (alpha * before)[:, :, None] * colors[tid][None], 0.0)
        color = weighted.sum(axis=1) + t_final[:, None] * background[None, :]
        index = np.arange(1, composited.shape[1] + 1)[None, :]
        count = np.max(np.where(composited, index, 0), axis=1, initial=0)  # one past the last composited
        shape = (len(rows), len(cols))
        image[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = color.reshape(shape + (c,))
        alpha_out[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = (1 - t_final).reshape(shape)
        last[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = (start + count).reshape(shape)
    return image, alpha_out, last


def vjp(means2d, conics, colors, opacities, background, gaussian_ids, tile_ranges, width, height, tile_size,
        v_image, v_alpha):
    """Gradients of sum(v_image * image) + sum(v_alpha * alpha): means2d,
    conics, colors, opacities, background (float64)."""
    means2d, conics, colors, opacities, background = (np.asarray(a, np.float64) for a in
                                                      (means2d, conics, colors, opacities, background))
    ids, ranges = np.asarray(gaussian_ids, np.int64), np.asarray(tile_ranges, np.int64)
    v_image, v_alpha = np.asarray(v_image, np.float64), np.asarray(v_alpha, np.float64)
    g_mean, g_conic = np.zeros_like(means2d), np.zeros_like(conics)
    g_color, g_opacity, g_background = np.zeros_like(colors), np.zeros_like(opacities), np.zeros_like(background)
    for tile, rows, cols in _tiles(width, height, tile_size):
        start, end = ranges[tile]
        tid = ids[start:end]
        dx, dy, vis, alpha, clamped, composited, before = _tile(means2d, conics, opacities, tid, rows, cols)
        vi = v_image[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].reshape(-1, colors.shape[1])  # [P, C]
        va = v_alpha[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].reshape(-1)  # [P]
        t_final = np.prod(1 - alpha, axis=1)  # [P]
        weight = alpha * before  # [P, K]
        np.add.at(g_color, tid, weight.T @ vi)
        g_background += t_final @ vi
        cv = vi @ colors[tid].T  # [P, K]: colour . v_image
        contribution = weight * cv
        behind = np.cumsum(contribution[:, ::-1], axis=1)[:, ::-1] - contribution  # sum over j > k
        with np.errstate(divide="ignore", invalid="ignore"):
            ra = np.where(composited, 1 / (1 - alpha), 0.0)
        d_alpha = cv * before - behind * ra + (t_final * (va - vi @ background))[:, None] * ra
        d_alpha = np.where(composited & ~clamped, d_alpha, 0.0)
        d_sigma = -opacities[tid][None, :] * vis * d_alpha
        d_sigma = np.where(composited & ~clamped, d_sigma, 0.0)
        q = conics[tid]
        np.add.at(g_opacity, tid, np.sum(np.where(composited & ~clamped, vis * d_alpha, 0.0), axis=0))
        np.add.at(g_mean, tid, np.stack([np.sum(d_sigma * (q[None, :, 0] * dx + q[None, :, 1] * dy), axis=0),
                                         np.sum(d_sigma * (q[None, :, 1] * dx + q[None, :, 2] * dy), axis=0)], -1))
        np.add.at(g_conic, tid, np.stack([np.sum(0.5 * d_sigma * dx ** 2, axis=0), np.sum(d_sigma * dx * dy, axis=0),
                                          np.sum(0.5 * d_sigma * dy ** 2, axis=0)], -1))
    return g_mean, g_conic, g_color, g_opacity, g_background


def scene(rng, n, channels, width, height, tile_size=16, scale=(1.0, 5.0), opacity=(0.05, 0.9)):
    """Random inputs of the op as float32 / int32 arrays, binned by
    `tile_bin`: n Gaussians around the image, rotated covariances of standard
    deviations in `scale` pixels, radii (x and y alike) ceil(3 sqrt(largest eigenvalue)),
    opacities in `opacity`, colours and background in [0, 1]."""
    means2d = rng.uniform(-4, [width + 4, height + 4], (n, 2))
    s = rng.uniform(*scale, (n, 2))
    angle = rng.uniform(0, np.pi, n)
    rot = np.stack([np.stack([np.cos(angle), -np.sin(angle)], -1), np.stack([np.sin(angle), np.cos(angle)], -1)], -2)
    cov = rot @ (s[:, :, None] ** 2 * np.eye(2)) @ np.swapaxes(rot, -1, -2)
    inv = np.linalg.inv(cov) if n else np.zeros((0, 2, 2))
    conics = np.stack([inv[:, 0, 0], inv[:, 0, 1], inv[:, 1, 1]], -1)
    radii = np.repeat(np.ceil(3 * s.max(-1)).astype(np.int32)[:, None], 2, 1)
    ids, ranges = tile_bin(means2d, radii, rng.uniform(1, 5, n), width, height, tile_size)
    return [means2d.astype(np.float32), conics.astype(np.float32), rng.uniform(0, 1, (n, channels)).astype(np.float32),
            rng.uniform(*opacity, n).astype(np.float32), rng.uniform(0, 1, channels).astype(np.float32), ids, ranges]


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs (image, alpha), and the gradients of sum(cotangent * output) as a
    function of the cotangents (none for the index inputs)."""
    sizes = (attrs["width"], attrs["height"], attrs["tile_size"])
    image, alpha, _ = rasterize(*inputs, *sizes)
    return [image, alpha], lambda cots: list(vjp(*inputs, *sizes, cots[0], cots[1])) + [None, None]
