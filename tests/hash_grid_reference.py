"""Independent NumPy reference of the multiresolution hash encoding.

Written from the formulas of Mueller et al. 2022 / tiny-cuda-nn's "Hash" grid
as stated in the issue and ../shared/notes/hash-encoding-facts.md, not from the
kernel code: vectorised over points, one level and one corner at a time; grid
geometry in float32 steps (as tiny-cuda-nn computes it), index arithmetic in
uint64 arrays with an explicit 32-bit wrap, weights and sums in float64.

Out-of-range rule (the op's documented behaviour): NaN/inf coordinates zero
the point in every mode; "clamp" clamps to [0, 1] (zero input gradient along a
clamped coordinate), "wrap" uses the coordinate as is, "zero" zeroes points
outside [0, 1]^D.
"""
import numpy as np

PRIMES = (1, 2654435761, 805459861, 3674653429)
MASK32 = np.uint64(0xFFFFFFFF)


def per_level_scale_from(base_resolution, finest_resolution, num_levels):
    """instant-NGP's b = exp(ln(finest / base) / (L - 1))."""
    if num_levels == 1:
        return 1.0
    return float(np.exp(np.log(finest_resolution / base_resolution) / (num_levels - 1)))


def levels(input_dim, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    """[(scale float32, resolution, entries, offset, hashed)] per level."""
    # float32 log2 and exp2, each rounded once from float64 (correctly rounded
    # float32 libm results, as glibc / CUDA / Metal give for these arguments).
    log2_scale = np.float32(np.log2(np.float64(np.float32(per_level_scale))))
    out = []
    offset = 0
    for level in range(num_levels):
        exponent = np.float32(np.float32(level) * log2_scale)
        grow = np.float32(2.0 ** float(exponent))  # exp2, rounded once to float32
        scale = np.float32(np.float32(grow * np.float32(base_resolution)) - np.float32(1.0))
        resolution = int(np.ceil(scale)) + 1
        dense = min(resolution ** input_dim, 2**31 - 1)
        entries = min((dense + 7) // 8 * 8, 2**log2_hashmap_size)
        hashed = resolution ** input_dim > entries
        out.append((scale, resolution, entries, offset, hashed))
        offset += entries
    return out


def hash_grid_size(input_dim, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    lv = levels(input_dim, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    scale, resolution, entries, offset, hashed = lv[-1]
    return offset + entries


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


def _locate(used, scale, interpolation):
    # pos = scale * x + 0.5 rounded once to float32 (a fused multiply-add).
    pos = (np.float64(scale) * used.astype(np.float64) + 0.5).astype(np.float32)
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


def _corner_rows(cell, bits, resolution, entries, hashed):
    d_count = cell.shape[1]
    vertex = (cell + np.array(bits, np.uint64)[None, :]) & MASK32
    if hashed:
        index = np.zeros(cell.shape[0], np.uint64)
        for d in range(d_count):
            index ^= (vertex[:, d] * np.uint64(PRIMES[d])) & MASK32
    else:
        index = np.zeros(cell.shape[0], np.uint64)
        stride = 1
        for d in range(d_count):
            index = (index + vertex[:, d] * np.uint64(stride)) & MASK32
            stride *= resolution
    return (index % np.uint64(entries)).astype(np.int64)


def _corners(d_count):
    for idx in range(1 << d_count):
        yield [(idx >> d) & 1 for d in range(d_count)]


def _walk(x, grid, out_of_range, interpolation):
    """Yields (level, scale, offset, valid, mask, [(rows, weight, dweight[N, D])])."""
    used, mask, valid = _prepare(x, out_of_range)
    d_count = used.shape[1]
    for level, (scale, resolution, entries, offset, hashed) in enumerate(grid):
        cell, w, dw = _locate(used, scale, interpolation)
        corners = []
        for bits in _corners(d_count):
            rows = _corner_rows(cell, bits, resolution, entries, hashed)
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
        yield level, float(scale), offset, valid, mask, corners


def encode(x, table, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
           interpolation="linear", out_of_range="clamp"):
    x = np.asarray(x, np.float32)
    table = np.asarray(table, np.float64)
    n, d_count = x.shape
    f = table.shape[1]
    grid = levels(d_count, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    out = np.zeros((n, num_levels * f))
    for level, scale, offset, valid, mask, corners in _walk(x, grid, out_of_range, interpolation):
        acc = np.zeros((n, f))
        for rows, weight, _ in corners:
            acc += weight[:, None] * table[offset + rows]
        out[:, level * f:(level + 1) * f] = np.where(valid[:, None], acc, 0)
    return out


def encode_grads(x, table, grad_encoded, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                 interpolation="linear", out_of_range="clamp"):
    """(d table [P, F], d inputs [N, D]) of sum(grad_encoded * encode(x, table))."""
    x = np.asarray(x, np.float32)
    table = np.asarray(table, np.float64)
    dy = np.asarray(grad_encoded, np.float64)
    n, d_count = x.shape
    f = table.shape[1]
    grid = levels(d_count, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    d_table = np.zeros(table.shape)
    d_x = np.zeros((n, d_count))
    for level, scale, offset, valid, mask, corners in _walk(x, grid, out_of_range, interpolation):
        dyl = np.where(valid[:, None], dy[:, level * f:(level + 1) * f], 0)
        for rows, weight, dweight in corners:
            np.add.at(d_table, offset + rows, weight[:, None] * dyl)
            dot = np.sum(table[offset + rows] * dyl, axis=1)
            d_x += scale * dweight * dot[:, None]
    d_x *= mask
    d_x[~np.isfinite(np.asarray(x)).any(axis=1)] = 0
    return d_table, d_x


def encode_second_order(x, table, grad_encoded, grad_grad_inputs, *, num_levels, log2_hashmap_size,
                        base_resolution, per_level_scale, interpolation="linear", out_of_range="clamp"):
    """Gradients of sum(G * d_inputs) w.r.t. table and grad_encoded, where
    d_inputs = encode_grads(...)[1] and G = grad_grad_inputs."""
    x = np.asarray(x, np.float32)
    table = np.asarray(table, np.float64)
    dy = np.asarray(grad_encoded, np.float64)
    gg = np.asarray(grad_grad_inputs, np.float64)
    n, d_count = x.shape
    f = table.shape[1]
    grid = levels(d_count, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    d_table = np.zeros(table.shape)
    d_dy = np.zeros(dy.shape)
    for level, scale, offset, valid, mask, corners in _walk(x, grid, out_of_range, interpolation):
        g = np.where(valid[:, None], gg * mask, 0)
        dyl = dy[:, level * f:(level + 1) * f]
        for rows, weight, dweight in corners:
            coef = scale * np.sum(dweight * g, axis=1)
            np.add.at(d_table, offset + rows, coef[:, None] * dyl)
            d_dy[:, level * f:(level + 1) * f] += coef[:, None] * table[offset + rows]
    return d_table, d_dy
