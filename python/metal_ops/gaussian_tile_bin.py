"""The binning of projected Gaussians into image tiles, each tile's Gaussians
sorted front to back, for Gaussian splatting
(kernels/gaussian_tile_bin/gaussian_tile_bin_op.cc).

The tile rectangle, the sort keys, the op's declaration and its checks live
once in kernels/gaussian_tile_bin/gaussian_tile_bin.h (CPU and CUDA kernels).
docs/GAUSSIAN_TILE_BIN.md describes the op.
"""
import collections

import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs
from metal_ops._loader import load_library

TileBins = collections.namedtuple("TileBins", ["gaussian_ids", "tile_ranges"])

tf.no_gradient("MetalOpsGaussianTileBin")


def gaussian_tile_bin(means2d, radii, depths, *, width, height, tile_size=16, name=None):
    """The (tile, Gaussian) intersections of projected Gaussians, sorted.

    The image has tiles_x = ceil(width / tile_size) by tiles_y =
    ceil(height / tile_size) tiles; tile (tx, ty) has id ty * tiles_x + tx. A
    Gaussian of radii (rx, ry) > 0 at (u, v) touches the tiles
    [floor((u - rx) / tile_size), ceil((u + rx) / tile_size)) x
    [floor((v - ry) / tile_size), ceil((v + ry) / tile_size)), clamped to the
    image's (gsplat's isect_tiles, in float32); radii 0 touch none.

    Args:
      means2d: [N, 2] float32 pixel coordinates (`gaussian_project`'s).
      radii: [N, 2] int32 radii (x, y) in pixels (`gaussian_project`'s).
      depths: [N] float32 depths.
      width, height: the image size in pixels, 1 to 65536.
      tile_size: the tiles' side in pixels, 1 to 256.

    Returns `TileBins(gaussian_ids, tile_ranges)`: gaussian_ids [M] int32,
    the Gaussian of each of the M intersections, sorted by tile id, then
    depth ascending, then Gaussian index; tile_ranges [tiles_y * tiles_x, 2]
    int32, each tile's [start, end) in gaussian_ids (start == end for a tile
    no Gaussian touches). Not differentiable (indices). CPU and CUDA (no
    Metal kernel, no XLA: M depends on the data).
    """
    op = "gaussian_tile_bin"
    with tf.name_scope(name or op):
        attrs = op_attrs(op, "MetalOpsGaussianTileBin", width=width, height=height, tile_size=tile_size)
        means2d = float_tensor(op, "means2d", means2d)
        radii = float_tensor(op, "radii", radii, (tf.int32,))
        depths = float_tensor(op, "depths", depths)
        return TileBins(*load_library().metal_ops_gaussian_tile_bin(means2d, radii, depths, **attrs))


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): a projected
    scene's bins, an empty set, tiles of 8 and 16 pixels."""
    import numpy as np

    from metal_ops import selftest
    from metal_ops._reference import gaussian_project as project_ref

    rng, out = selftest.rng("gaussian_tile_bin"), []
    for n, (width, height), tile_size in [(1001, (64, 48), 16), (0, (16, 16), 16), (5000, (200, 150), 8)]:
        means = np.stack([rng.uniform(-2.5, 2.5, n), rng.uniform(-2, 2, n), rng.uniform(1, 6, n)], axis=1)
        quats = rng.normal(size=(n, 4))
        scales = np.exp(rng.uniform(-3.5, -1, size=(n, 3)))
        f = 0.9 * width
        k = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]])
        means2d, _, depths, radii = project_ref.project(means, quats, scales, np.eye(4), k, width, height)
        inputs = [means2d.astype(np.float32), radii, depths.astype(np.float32)]
        attrs = {"width": width, "height": height, "tile_size": tile_size}
        # float32: the means' and depths' type, which puts the kernel on a GPU (its outputs are int32).
        out.append(selftest.case("gaussian_tile_bin", f"n={n} image={width}x{height} tile={tile_size}", np.float32,
                                 inputs, lambda *v, a=attrs: gaussian_tile_bin(*v, **a), 0, attrs,
                                 differentiable=False))
    return out
