"""The binning of projected Gaussians into image tiles (gsplat's
isect_tiles and its sort), in NumPy, independent of
kernels/gaussian_tile_bin/gaussian_tile_bin.h.

- `tile_rects(means2d, radii, tile_size, tiles_x, tiles_y)`: each Gaussian's
  tile rectangle [x0, x1) x [y0, y1), radii [N, 2] (x, y). The rectangle is a
  discrete decision at the floors and ceilings of (u -+ rx) / tile_size and
  (v -+ ry) / tile_size: it is computed in float32,
  as the kernels compute it, so that a float64 rounding cannot move a tile
  edge.
- `tile_bin(means2d, radii, depths, width, height, tile_size)`:
  (gaussian_ids, tile_ranges), every (tile, Gaussian) pair listed and sorted
  with np.lexsort by (tile id, depth, index).
"""
import numpy as np


def tile_rects(means2d, radii, tile_size, tiles_x, tiles_y):
    m = np.asarray(means2d, np.float32).reshape(-1, 2)
    radii = np.asarray(radii).reshape(len(m), 2)
    rx, ry = radii[:, 0].astype(np.float32), radii[:, 1].astype(np.float32)
    ts = np.float32(tile_size)
    with np.errstate(invalid="ignore"):
        x0 = np.clip(np.nan_to_num(np.floor((m[:, 0] - rx) / ts)), 0, tiles_x).astype(np.int64)
        x1 = np.clip(np.nan_to_num(np.ceil((m[:, 0] + rx) / ts)), 0, tiles_x).astype(np.int64)
        y0 = np.clip(np.nan_to_num(np.floor((m[:, 1] - ry) / ts)), 0, tiles_y).astype(np.int64)
        y1 = np.clip(np.nan_to_num(np.ceil((m[:, 1] + ry) / ts)), 0, tiles_y).astype(np.int64)
    culled = (radii[:, 0] <= 0) | (radii[:, 1] <= 0)
    return [np.where(culled, 0, v) for v in (x0, np.maximum(x1, x0), y0, np.maximum(y1, y0))]


def tile_bin(means2d, radii, depths, width, height, tile_size=16):
    """(gaussian_ids [M] int32, tile_ranges [tiles, 2] int32)."""
    tiles_x, tiles_y = -(-width // tile_size), -(-height // tile_size)
    x0, x1, y0, y1 = tile_rects(means2d, radii, tile_size, tiles_x, tiles_y)
    tile_ids, gaussians = [], []
    for i in range(len(x0)):
        ty, tx = np.meshgrid(np.arange(y0[i], y1[i]), np.arange(x0[i], x1[i]), indexing="ij")
        tile_ids.append((ty * tiles_x + tx).ravel())
        gaussians.append(np.full(tx.size, i))
    tile_ids = np.concatenate(tile_ids + [np.zeros(0, np.int64)]).astype(np.int64)
    gaussians = np.concatenate(gaussians + [np.zeros(0, np.int64)]).astype(np.int64)
    depth = np.asarray(depths, np.float64).reshape(-1)[gaussians]
    order = np.lexsort((gaussians, depth, tile_ids))
    tiles = tiles_x * tiles_y
    sorted_tiles = tile_ids[order]
    starts = np.searchsorted(sorted_tiles, np.arange(tiles), side="left")
    ends = np.searchsorted(sorted_tiles, np.arange(tiles), side="right")
    return gaussians[order].astype(np.int32), np.stack([starts, ends], -1).astype(np.int32)


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest): the outputs; no gradient."""
    return list(tile_bin(*inputs, **attrs)), None
