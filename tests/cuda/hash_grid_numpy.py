"""Independent NumPy reference of the multiresolution hash encoding.

Written from the formulas (instant-NGP paper, tiny-cuda-nn's "Hash" grid, as
summarised in docs/HASH_ENCODING.md and the op's
documented out-of-range rules), not from the kernels: vectorised over points,
float64 arithmetic except where the formula is defined in float32 (level
scale, the fused position scale * x + 0.5, the cell split). No TensorFlow, so
the CUDA harness tests (tests/cuda) and the Metal shim tests can share it.
"""
import numpy as np

PRIMES = (1, 2654435761, 805459861, 3674653429)
MASK32 = np.uint64(0xFFFFFFFF)
INTERPOLATIONS = {"linear": 0, "smoothstep": 1}
OUT_OF_RANGE = {"clamp": 0, "wrap": 1, "zero": 2}


def levels(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    """Per-level (scale, resolution, entries, offset, hashed) and the row count P."""
    log2_scale = np.float32(np.log2(np.float32(per_level_scale)))
    out, offset = [], 0
    for level in range(num_levels):
        scale = np.float32(np.exp2(np.float32(level) * log2_scale)) * np.float32(base_resolution) - np.float32(1)
        resolution = int(np.ceil(scale)) + 1
        dense = min(resolution ** dims, 2 ** 31 - 1)
        entries = min((dense + 7) // 8 * 8, 2 ** log2_hashmap_size)
        hashed = resolution ** dims > entries
        out.append(dict(scale=np.float32(scale), resolution=resolution, entries=entries, offset=offset,
                        hashed=hashed))
        offset += entries
    return out, offset


def table_rows(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    return levels(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale)[1]


def _prepare(x, out_of_range):
    """Coordinates used, d(used)/d(input) mask, and which points are encoded."""
    x = np.asarray(x, np.float32)
    finite = np.isfinite(x).all(axis=1)
    inside = ((x >= 0) & (x <= 1)).all(axis=1)
    valid = finite & inside if out_of_range == "zero" else finite
    if out_of_range == "clamp":
        used = np.clip(x, np.float32(0), np.float32(1))
        mask = ((x >= 0) & (x <= 1)).astype(np.float64)
    else:
        used = x.copy()
        mask = np.ones(x.shape, np.float64)
    used[~valid] = 0
    return used, mask, valid


def _locate(used, scale, interpolation):
    # pos = fma(scale, x, 0.5) in float32: the exact product plus 0.5 in
    # float64, rounded once to float32.
    pos = (np.float64(scale) * used.astype(np.float64) + 0.5).astype(np.float32)
    lower = np.floor(pos)
    cell = (lower.astype(np.int64) & 0xFFFFFFFF).astype(np.uint64)
    frac = (pos - lower).astype(np.float64)
    if interpolation == "smoothstep":
        w, dw = frac * frac * (3.0 - 2.0 * frac), 6.0 * frac * (1.0 - frac)
    else:
        w, dw = frac, np.ones_like(frac)
    margin = np.minimum(frac, 1.0 - frac)  # distance of pos to a cell boundary
    return cell, w, dw, margin


def _rows(vertex, level, dims):
    """Row within the level of integer vertices [N, D] (uint64 holding uint32)."""
    if level["hashed"]:
        index = np.zeros(vertex.shape[0], np.uint64)
        for d in range(dims):
            index ^= (vertex[:, d] * np.uint64(PRIMES[d])) & MASK32
    else:
        index = np.zeros(vertex.shape[0], np.uint64)
        stride = 1
        for d in range(dims):
            index = (index + vertex[:, d] * np.uint64(stride)) & MASK32
            stride *= level["resolution"]
    return (index % np.uint64(level["entries"])).astype(np.int64)


def _corners(cell, w, dims):
    """Yields (upper-bit mask per dim, vertex, weight) for the 2^D corners."""
    for idx in range(1 << dims):
        upper = [(idx >> d) & 1 for d in range(dims)]
        vertex = np.stack([(cell[:, d] + np.uint64(upper[d])) & MASK32 for d in range(dims)], axis=1)
        weight = np.ones(cell.shape[0])
        for d in range(dims):
            weight = weight * (w[:, d] if upper[d] else 1.0 - w[:, d])
        yield upper, vertex, weight


def _per_level(inputs, dims, grid, interpolation, out_of_range):
    used, mask, valid = _prepare(inputs, out_of_range)
    for lv in grid:
        located = [_locate(used[:, d], lv["scale"], interpolation) for d in range(dims)]
        cell = np.stack([c[0] for c in located], axis=1)
        w = np.stack([c[1] for c in located], axis=1)
        dw = np.stack([c[2] for c in located], axis=1)
        margin = np.min(np.stack([c[3] for c in located], axis=1), axis=1)
        yield lv, cell, w, dw, margin, mask, valid


def encode(inputs, table, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
           interpolation="linear", out_of_range="clamp"):
    """[N, L*F] float64 encoding (round to the table dtype to compare)."""
    inputs = np.asarray(inputs, np.float32)
    n, dims = inputs.shape
    features = table.shape[1]
    grid, rows_total = levels(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    assert table.shape[0] == rows_total
    values = table.astype(np.float64)
    out = np.zeros((n, num_levels, features))
    for l, (lv, cell, w, _, _, _, valid) in enumerate(_per_level(inputs, dims, grid, interpolation, out_of_range)):
        for _, vertex, weight in _corners(cell, w, dims):
            out[:, l, :] += weight[:, None] * values[lv["offset"] + _rows(vertex, lv, dims)]
        out[~valid, l, :] = 0
    return out.reshape(n, num_levels * features)


def backward(grad_encoded, inputs, table, *, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
             interpolation="linear", out_of_range="clamp"):
    """(grad_table [P, F], grad_inputs [N, D], margin [N]) in float64.

    margin: the smallest distance, over levels and dims, of a point's grid
    position to a cell boundary (the input gradient jumps across boundaries,
    so comparisons of it skip points closer than float32 rounding).
    """
    inputs = np.asarray(inputs, np.float32)
    n, dims = inputs.shape
    features = table.shape[1]
    grid, rows_total = levels(dims, num_levels, log2_hashmap_size, base_resolution, per_level_scale)
    dy_all = np.asarray(grad_encoded, np.float64).reshape(n, num_levels, features)
    values = table.astype(np.float64)
    grad_table = np.zeros((rows_total, features))
    grad_inputs = np.zeros((n, dims))
    min_margin = np.full(n, np.inf)
    for l, (lv, cell, w, dw, margin, mask, valid) in enumerate(
            _per_level(inputs, dims, grid, interpolation, out_of_range)):
        dy = np.where(valid[:, None], dy_all[:, l, :], 0.0)
        min_margin = np.minimum(min_margin, np.where(valid, margin, np.inf))
        for upper, vertex, weight in _corners(cell, w, dims):
            rows = lv["offset"] + _rows(vertex, lv, dims)
            for f in range(features):
                grad_table[:, f] += np.bincount(rows, weights=weight * dy[:, f], minlength=rows_total)
            dot = np.sum(values[rows] * dy, axis=1)
            for d in range(dims):
                dweight = dw[:, d] if upper[d] else -dw[:, d]
                for k in range(dims):
                    if k != d:
                        dweight = dweight * (w[:, k] if upper[k] else 1.0 - w[:, k])
                grad_inputs[:, d] += np.float64(lv["scale"]) * dweight * dot
    grad_inputs *= mask
    return grad_table, grad_inputs, min_margin
