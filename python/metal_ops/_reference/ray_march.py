"""RayMarch from its specification (kernels/ray_march/ray_march_op.cc's doc), in
float64 and plain Python loops: packed samples of rays through an occupancy grid."""
import math

import numpy as np


def unpack(occupancy, grid_resolution):
    """[C, ceil(G^3/8)] uint8 -> [C, G, G, G] bool indexed [c, z, y, x]."""
    g = grid_resolution
    bits = np.unpackbits(np.asarray(occupancy, np.uint8), axis=1, bitorder="little")[:, : g ** 3]
    return bits.reshape(-1, g, g, g).astype(bool)


def jitter_u(seed, ray):
    """The u in [0, 1) of (seed, ray): murmur3's 32-bit finaliser of seed * 0x9E3779B1 + ray."""
    m = 0xFFFFFFFF
    h = (seed * 0x9E3779B1 + ray) & m
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return (h >> 8) / 16777216.0


def reference(origins, directions, near, far, occupancy, aabb, grid_resolution, step_size, cone_angle=0.0,
              max_step_size=1e10, max_samples=1024, jitter=False, seed=0):
    """Returns (t_starts, t_ends, ray_indices, ray_offsets, ray_counts) as NumPy arrays."""
    grid = unpack(occupancy, grid_resolution)
    cascades, g = grid.shape[0], grid_resolution
    lo0, hi0 = np.asarray(aabb[:3], np.float64), np.asarray(aabb[3:], np.float64)
    center, half0 = (lo0 + hi0) / 2, (hi0 - lo0) / 2

    def box(c):
        return center - half0 * 2.0 ** c, center + half0 * 2.0 ** c

    def step(t):
        return min(max(t * cone_angle, step_size), max_step_size)

    starts, ends, idx, counts = [], [], [], []
    for r in range(len(origins)):
        o = np.asarray(origins[r], np.float64)
        d = np.asarray(directions[r], np.float64)
        lo, hi = box(cascades - 1)
        t0, t1 = -math.inf, math.inf
        for a in range(3):
            if d[a] == 0:
                if not lo[a] <= o[a] <= hi[a]:
                    t0, t1 = math.inf, -math.inf
                continue
            ta, tb = (lo[a] - o[a]) / d[a], (hi[a] - o[a]) / d[a]
            t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
        t, t_far = max(float(near[r]), t0), min(float(far[r]), t1)
        n = 0
        if t < t_far and math.isfinite(t) and math.isfinite(t_far):
            if jitter:
                t += jitter_u(seed, r) * step(t)
            while n < max_samples and t < t_far:
                t_end = min(t + step(t), t_far)
                t_mid = (t + t_end) / 2
                x = o + t_mid * d
                c = next((c for c in range(cascades) if np.all(np.abs(x - center) <= half0 * 2.0 ** c)), None)
                if c is None:
                    break
                blo, bhi = box(c)
                cell = np.clip(np.floor((x - blo) / (bhi - blo) * g), 0, g - 1).astype(int)
                if grid[c, cell[2], cell[1], cell[0]]:
                    starts.append(t)
                    ends.append(t_end)
                    idx.append(r)
                    n += 1
                    t = t_end
                else:
                    size = (bhi - blo) / g
                    exits = [(blo[a] + size[a] * (cell[a] + (d[a] > 0)) - o[a]) / d[a] for a in range(3) if d[a] != 0]
                    t = max(min(exits), t_mid)
        counts.append(n)
    counts = np.asarray(counts, np.int32)
    offsets = (np.cumsum(counts) - counts).astype(np.int32)
    return (np.asarray(starts, np.float32), np.asarray(ends, np.float32), np.asarray(idx, np.int32), offsets,
            counts)


# ---- inputs shared by the TF, MSL-shim and CUDA harness tests ----------------------------------
UNIT = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def grid_bits(cells_zyx, g, cascades=1):
    """Bitfield of a [C, G, G, G] bool grid given as a NumPy array or a list of occupied (c, z, y, x)."""
    if isinstance(cells_zyx, np.ndarray):
        occ = cells_zyx.astype(bool)
    else:
        occ = np.zeros((cascades, g, g, g), bool)
        for c, z, y, x in cells_zyx:
            occ[c, z, y, x] = True
    return np.packbits(occ.reshape(occ.shape[0], -1), axis=1, bitorder="little")


def random_case(seed, rays, g, cascades, fill):
    rng = np.random.default_rng(seed)
    origins = rng.uniform(-3, 3, (rays, 3)).astype(np.float32)
    targets = rng.uniform(-1, 2, (rays, 3))
    dirs = (targets - origins).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    # axis-parallel rays too
    axis = rng.integers(0, 3, rays // 4)
    dirs[: rays // 4] = 0.0
    dirs[np.arange(rays // 4), axis] = rng.choice([-1.0, 1.0], rays // 4)
    near = rng.uniform(0, 0.5, rays).astype(np.float32)
    far = rng.uniform(3, 12, rays).astype(np.float32)
    occ = rng.uniform(size=(cascades, g, g, g)) < fill
    return origins, dirs, near, far, grid_bits(occ, g)


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs, and the gradients of sum(cotangent * output) as a function of the
    cotangents (None: no gradient)."""
    return list(reference(*inputs[:5], seed=int(inputs[5]), **attrs)), None
