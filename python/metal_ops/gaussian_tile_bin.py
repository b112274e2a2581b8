"""The binning of projected Gaussians into image tiles, each tile's Gaussians
sorted front to back, for Gaussian splatting
(kernels/gaussian_tile_bin/gaussian_tile_bin_op.cc).

The tile rectangle, the sort keys, the op's declaration and its checks live
once in kernels/gaussian_tile_bin/gaussian_tile_bin.h (CPU and CUDA kernels).
docs/GAUSSIAN_TILE_BIN.md describes the op.
"""
import collections

import tensorflow as tf

from metal_ops._args import float_tensor, integer, op_attrs
from metal_ops._loader import load_library

TileBins = collections.namedtuple("TileBins", ["gaussian_ids", "tile_ranges"])
TileBinsStatic = collections.namedtuple("TileBinsStatic",
                                        ["gaussian_ids", "tile_ranges", "num_intersections", "num_gaussians"])
TileBinsStatic.__doc__ = """Tile bins in outputs of a static size B (`gaussian_tile_bin_static`).

gaussian_ids: [B] int32; [0, num_intersections) sorted as `gaussian_tile_bin`'s, the rest -1.
tile_ranges: [tiles_y * tiles_x, 2] int32, each tile's [start, end) among the kept entries.
num_intersections: int32 scalar, the intersections kept.
num_gaussians: int32 scalar, the Gaussians kept: N where every intersection fits.
"""

tf.no_gradient("MetalOpsGaussianTileBin")
tf.no_gradient("MetalOpsGaussianTileBinStatic")


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
    no Gaussian touches). Not differentiable (indices). CPU, CUDA and Metal
    kernels (no XLA: M depends on the data; `gaussian_tile_bin_static` bins
    into outputs of a static size).
    """
    op = "gaussian_tile_bin"
    with tf.name_scope(name or op):
        attrs = op_attrs(op, "MetalOpsGaussianTileBin", width=width, height=height, tile_size=tile_size)
        means2d = float_tensor(op, "means2d", means2d)
        radii = float_tensor(op, "radii", radii, (tf.int32,))
        depths = float_tensor(op, "depths", depths)
        return TileBins(*load_library().metal_ops_gaussian_tile_bin(means2d, radii, depths, **attrs))


def gaussian_tile_bin_static(means2d, radii, depths, *, width, height, max_intersections, tile_size=16, name=None):
    """`gaussian_tile_bin` into outputs of a static size, `max_intersections`
    entries: what XLA compiles (`tf.function(jit_compile=True)`).

    Gaussians are taken whole, in index order, while their intersections fit
    in the budget; the Gaussians after the first one that does not fit get
    none, in every tile alike (so a cut image is the image of the first
    `num_gaussians` Gaussians, without seams between tiles), as
    `ray_march_static` keeps whole rays. The kept entries are
    `gaussian_tile_bin`'s of the kept Gaussians alone; the rest of
    gaussian_ids is -1, which no tile range covers. `num_gaussians < N` says
    that the budget dropped Gaussians. CPU, CUDA and Metal kernels (the GPUs'
    read nothing back to the host), and XLA kernels on the CPU and CUDA.

    Args: `gaussian_tile_bin`'s, plus
      max_intersections: B >= 1, the size of gaussian_ids.

    Returns:
      TileBinsStatic.
    """
    op = "gaussian_tile_bin_static"
    with tf.name_scope(name or op):
        attrs = op_attrs(op, "MetalOpsGaussianTileBinStatic", width=width, height=height, tile_size=tile_size,
                         max_intersections=integer(op, "max_intersections", max_intersections, 1))
        means2d = float_tensor(op, "means2d", means2d)
        radii = float_tensor(op, "radii", radii, (tf.int32,))
        depths = float_tensor(op, "depths", depths)
        return TileBinsStatic(*load_library().metal_ops_gaussian_tile_bin_static(means2d, radii, depths, **attrs))


def _selftest_scene(rng, n, width, height):
    """A projected scene of n Gaussians: [means2d, radii, depths] as the ops take them."""
    import numpy as np

    from metal_ops._reference import gaussian_project as project_ref

    means = np.stack([rng.uniform(-2.5, 2.5, n), rng.uniform(-2, 2, n), rng.uniform(1, 6, n)], axis=1)
    quats = rng.normal(size=(n, 4))
    scales = np.exp(rng.uniform(-3.5, -1, size=(n, 3)))
    f = 0.9 * width
    k = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]])
    means2d, _, depths, radii = project_ref.project(means, quats, scales, np.eye(4), k, width, height)
    return [means2d.astype(np.float32), radii, depths.astype(np.float32)]


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): a projected
    scene's bins, an empty set, tiles of 8 and 16 pixels; the static bins
    with a budget above the total (padding), below it (Gaussians cut) and of
    an empty set, under XLA (XLA_ONLY: outside XLA the op has a CPU kernel only)."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("gaussian_tile_bin"), []
    for n, (width, height), tile_size in [(1001, (64, 48), 16), (0, (16, 16), 16), (5000, (200, 150), 8)]:
        inputs = _selftest_scene(rng, n, width, height)
        attrs = {"width": width, "height": height, "tile_size": tile_size}
        # float32: the means' and depths' type, which puts the kernel on a GPU (its outputs are int32).
        out.append(selftest.case("gaussian_tile_bin", f"n={n} image={width}x{height} tile={tile_size}", np.float32,
                                 inputs, lambda *v, a=attrs: gaussian_tile_bin(*v, **a), 0, attrs,
                                 differentiable=False))
    rng = selftest.rng("gaussian_tile_bin_static")
    for n, (width, height), budget in [(1001, (64, 48), 4000), (1001, (64, 48), 700), (0, (16, 16), 5)]:
        inputs = _selftest_scene(rng, n, width, height)
        attrs = {"width": width, "height": height, "tile_size": 16, "max_intersections": budget}
        out.append(selftest.case("gaussian_tile_bin_static", f"n={n} image={width}x{height} budget={budget}",
                                 np.float32, inputs, lambda *v, a=attrs: tuple(gaussian_tile_bin_static(*v, **a)), 0,
                                 attrs, differentiable=False, xla=selftest.XLA_ONLY))
    return out
