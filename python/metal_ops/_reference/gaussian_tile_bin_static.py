"""GaussianTileBinStatic (metal_ops.gaussian_tile_bin_static) from the NumPy
reference of GaussianTileBin (gaussian_tile_bin.py): Gaussians kept whole, in
index order, while their intersections fit in the budget; the bins of the
kept Gaussians alone, gaussian_ids padded with -1 to the budget; the counts
of intersections and Gaussians kept."""
import numpy as np

from . import gaussian_tile_bin


def reference(means2d, radii, depths, width, height, max_intersections, tile_size=16):
    """(gaussian_ids [max_intersections], tile_ranges [tiles, 2], num_intersections, num_gaussians)."""
    tiles_x, tiles_y = -(-width // tile_size), -(-height // tile_size)
    x0, x1, y0, y1 = gaussian_tile_bin.tile_rects(means2d, radii, tile_size, tiles_x, tiles_y)
    ends = np.cumsum((x1 - x0) * (y1 - y0))
    kept = int(np.sum(ends <= max_intersections))  # ends are non-decreasing
    m2, r, d = (np.asarray(v)[:kept] for v in (means2d, radii, depths))
    ids, ranges = gaussian_tile_bin.tile_bin(m2.reshape(-1, 2), r, d, width, height, tile_size)
    padded = np.concatenate([ids, np.full(max_intersections - len(ids), -1, np.int32)])
    return padded, ranges, np.int32(len(ids)), np.int32(kept)


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest): the outputs; no gradient."""
    return list(reference(*inputs, **attrs)), None
