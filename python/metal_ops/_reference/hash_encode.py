"""Independent NumPy reference of the multiresolution hash encoding (HashEncode).

Written from the formulas of Mueller et al. 2022 / tiny-cuda-nn's "Hash" grid
as summarised in docs/HASH_ENCODE.md, not from the kernel code: vectorised
over points, one level and one corner at a time; grid geometry in float32 steps
(as tiny-cuda-nn computes it), index arithmetic in uint64 arrays with an
explicit 32-bit wrap, weights and sums in float64. No TensorFlow: the
self-test, the CPU tests, the CUDA harness tests, the MSL-shim tests and the
CUDA benchmarks share it.

Out-of-range rule (the op's documented behaviour): NaN/inf coordinates zero
the point in every mode; "clamp" clamps to [0, 1] (zero input gradient along a
clamped coordinate), "wrap" uses the coordinate as is, "zero" zeroes points
outside [0, 1]^D.
"""
from collections import namedtuple

import numpy as np

PRIMES = (1, 2654435761, 805459861, 3674653429)
MASK32 = np.uint64(0xFFFFFFFF)
# The integer codes of the modes in the C ABIs (harness, MSL shim).
INTERPOLATIONS = {"linear": 0, "smoothstep": 1}
OUT_OF_RANGE = {"clamp": 0, "wrap": 1, "zero": 2}

# One level of the grid: its float32 scale, vertices per side, table rows,
# first row in the table, and whether it is hashed (else dense).
Level = namedtuple("Level", "scale resolution entries offset hashed")


def per_level_scale_from(base_resolution, finest_resolution, num_levels):
    """instant-NGP's b = exp(ln(finest / base) / (L - 1))."""
    if num_levels == 1:
        return 1.0
    return float(np.exp(np.log(finest_resolution / base_resolution) / (num_levels - 1)))


def levels(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    """[Level] for a grid over `dims` input dimensions."""
    # float32 log2 and exp2, each rounded once from float64 (correctly rounded
    # float32 results, as glibc gives for these arguments; CUDA's and Metal's
    # may differ by an ulp, which moves no resolution of the tested grids).
    log2_scale = np.float32(np.log2(np.float64(np.float32(per_level_scale))))
    out = []
    offset = 0
    for level in range(num_levels):
        exponent = np.float32(np.float32(level) * log2_scale)
        grow = np.float32(2.0 ** float(exponent))
        scale = np.float32(np.float32(grow * np.float32(base_resolution)) - np.float32(1.0))
        resolution = int(np.ceil(scale)) + 1
        dense = min(resolution ** dims, 2**31 - 1)
        entries = min((dense + 7) // 8 * 8, 2**log2_hashmap_size)
        hashed = resolution ** dims > entries
        out.append(Level(scale, resolution, entries, offset, hashed))
        offset += entries
    return out


def table_rows(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    """The table's row count P (all levels)."""
    last = levels(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale)[-1]
    return last.offset + last.entries


def determinism_case():
    """The inputs of tests/test_hash_encode.py's bitwise-determinism test, in and out of
    process: (grid attributes, x [2^15, 3], table, grad_encoded [2^15, 32]), float32."""
    cfg = dict(num_levels=16, log2_hashmap_size=14, base_resolution=16,
               per_level_scale=per_level_scale_from(16, 2048, 16))
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (1 << 15, 3)).astype(np.float32)
    table = rng.normal(size=(table_rows(3, **cfg), 2)).astype(np.float32)
    grad_encoded = rng.normal(size=(1 << 15, 32)).astype(np.float32)
    return cfg, x, table, grad_encoded


def _prepare(x, out_of_range):
    """Used coordinates (float32), per-dim gradient mask, per-point validity."""
    x = np.asarray(x, np.float32)
    finite = np.all(np.isfinite(x), axis=1)
    inside = (x >= 0) & (x <= 1)
    if out_of_range == "clamp":
        used = np.clip(x, 0, 1)
        mask = inside.astype(np.float64)
        valid = finite
    elif out_of_range == "wrap":
        used = x.copy()
        mask = np.ones(x.shape)
        valid = finite
    elif out_of_range == "zero":
        used = x.copy()
        mask = np.ones(x.shape)
        valid = finite & np.all(inside, axis=1)
    else:
        raise ValueError(out_of_range)
    used = np.where(valid[:, None], used, np.float32(0)).astype(np.float32)
    return used, mask, valid


def _position(used, scale):
    """pos = scale * x + 0.5 rounded once to float32 (a fused multiply-add)."""
    return (np.float64(scale) * used.astype(np.float64) + 0.5).astype(np.float32)


def _locate(used, scale, interpolation):
    pos = _position(used, scale)
    lower = np.floor(pos)
    cell = lower.astype(np.int64).astype(np.uint64) & MASK32  # two's-complement wrap to uint32
    frac = (pos - lower).astype(np.float64)
    if interpolation == "linear":
        w, dw = frac, np.ones_like(frac)
    elif interpolation == "smoothstep":
        w, dw = frac * frac * (3 - 2 * frac), 6 * frac * (1 - frac)
    else:
        raise ValueError(interpolation)
    return cell, w, dw


def _corner_rows(cell, bits, level):
    d_count = cell.shape[1]
    vertex = (cell + np.array(bits, np.uint64)[None, :]) & MASK32
    index = np.zeros(cell.shape[0], np.uint64)
    if level.hashed:
        for d in range(d_count):
            index ^= (vertex[:, d] * np.uint64(PRIMES[d])) & MASK32
    else:
        stride = 1
        for d in range(d_count):
            index = (index + vertex[:, d] * np.uint64(stride)) & MASK32
            stride *= level.resolution
    return (index % np.uint64(level.entries)).astype(np.int64)


def _corners(d_count):
    for idx in range(1 << d_count):
        yield [(idx >> d) & 1 for d in range(d_count)]


def _walk(x, grid, out_of_range, interpolation):
    """Yields (level index, Level, valid, mask, [(rows, weight, dweight[N, D])])."""
    used, mask, valid = _prepare(x, out_of_range)
    d_count = used.shape[1]
    for index, level in enumerate(grid):
        cell, w, dw = _locate(used, level.scale, interpolation)
        corners = []
        for bits in _corners(d_count):
            rows = level.offset + _corner_rows(cell, bits, level)
            factors = [w[:, d] if bits[d] else 1 - w[:, d] for d in range(d_count)]
            weight = np.prod(factors, axis=0) if d_count > 1 else factors[0]
            dweight = np.empty((used.shape[0], d_count))
            for d in range(d_count):
                g = dw[:, d] if bits[d] else -dw[:, d]
                for k in range(d_count):
                    if k != d:
                        g = g * factors[k]
                dweight[:, d] = g
            corners.append((rows, weight, dweight))
        yield index, level, valid, mask, corners


def encode(x, table, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
           interpolation="linear", out_of_range="clamp"):
    """[N, L*F] float64 encoding (round to the table dtype to compare)."""
    x = np.asarray(x, np.float32)
    table = np.asarray(table, np.float64)
    n, d_count = x.shape
    f = table.shape[1]
    grid = levels(d_count, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    assert table.shape[0] == grid[-1].offset + grid[-1].entries, "table rows do not match the grid"
    out = np.zeros((n, num_levels * f))
    for index, _, valid, _, corners in _walk(x, grid, out_of_range, interpolation):
        acc = np.zeros((n, f))
        for rows, weight, _ in corners:
            acc += weight[:, None] * table[rows]
        out[:, index * f:(index + 1) * f] = np.where(valid[:, None], acc, 0)
    return out


def encode_grads(x, table, grad_encoded, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                 interpolation="linear", out_of_range="clamp"):
    """(d table [P, F], d inputs [N, D]) of sum(grad_encoded * encode(x, table)), float64."""
    x = np.asarray(x, np.float32)
    table = np.asarray(table, np.float64)
    dy = np.asarray(grad_encoded, np.float64).reshape(x.shape[0], num_levels * table.shape[1])
    n, d_count = x.shape
    f = table.shape[1]
    grid = levels(d_count, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    d_table = np.zeros(table.shape)
    d_x = np.zeros((n, d_count))
    for index, level, valid, mask, corners in _walk(x, grid, out_of_range, interpolation):
        dyl = np.where(valid[:, None], dy[:, index * f:(index + 1) * f], 0)
        for rows, weight, dweight in corners:
            for k in range(f):
                d_table[:, k] += np.bincount(rows, weights=weight * dyl[:, k], minlength=table.shape[0])
            dot = np.sum(table[rows] * dyl, axis=1)
            d_x += np.float64(level.scale) * dweight * dot[:, None]
    d_x *= mask
    return d_table, d_x


def boundary_margin(x, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale, out_of_range="clamp"):
    """[N]: the smallest distance, over levels and dims, of a point's grid
    position to a cell boundary (inf for points that are not encoded). The
    input gradient jumps across boundaries, so comparisons of it skip points
    closer than float32 rounding."""
    used, _, valid = _prepare(x, out_of_range)
    grid = levels(used.shape[1], num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    margin = np.full(used.shape[0], np.inf)
    for level in grid:
        pos = _position(used, level.scale)
        frac = (pos - np.floor(pos)).astype(np.float64)
        margin = np.minimum(margin, np.min(np.minimum(frac, 1.0 - frac), axis=1))
    return np.where(valid, margin, np.inf)


def encode_second_order(x, table, grad_encoded, grad_grad_inputs, *, num_levels, log2_hashmap_size,
                        base_resolution, per_level_scale, interpolation="linear", out_of_range="clamp"):
    """Gradients of sum(G * d_inputs) w.r.t. table and grad_encoded, where
    d_inputs = encode_grads(...)[1] and G = grad_grad_inputs."""
    x = np.asarray(x, np.float32)
    table = np.asarray(table, np.float64)
    dy = np.asarray(grad_encoded, np.float64)
    gg = np.asarray(grad_grad_inputs, np.float64)
    f = table.shape[1]
    grid = levels(x.shape[1], num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    d_table = np.zeros(table.shape)
    d_dy = np.zeros(dy.shape)
    for index, level, valid, mask, corners in _walk(x, grid, out_of_range, interpolation):
        g = np.where(valid[:, None], gg * mask, 0)
        dyl = dy[:, index * f:(index + 1) * f]
        for rows, weight, dweight in corners:
            coef = np.float64(level.scale) * np.sum(dweight * g, axis=1)
            np.add.at(d_table, rows, coef[:, None] * dyl)
            d_dy[:, index * f:(index + 1) * f] += coef[:, None] * table[rows]
    return d_table, d_dy


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): the grid attributes in
    `attrs`, linear interpolation, coordinates clamped (the op's defaults)."""
    x, table = inputs

    def grads(cots):
        d_table, d_x = encode_grads(x, table, cots[0], **attrs)
        return [d_x, d_table]

    return [encode(x, table, **attrs)], grads
