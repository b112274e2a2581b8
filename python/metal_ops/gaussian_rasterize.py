"""3D Gaussian splatting's rasterization (kernels/gaussian_rasterize/gaussian_rasterize_op.cc).

The op's declaration, per-pixel compositing, its reverse and the checks live
once in kernels/gaussian_rasterize/gaussian_rasterize.h (CPU and CUDA kernels).
docs/GAUSSIAN_RASTERIZE.md describes the op.
"""
import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs
from metal_ops._loader import load_library

_FLOATS = ("means2d", "conics", "colors", "opacities", "background")
_INDICES = ("gaussian_ids", "tile_ranges")


def gaussian_rasterize(means2d, conics, colors, opacities, background, gaussian_ids, tile_ranges, width, height,
                       tile_size=16, name=None):
    """Front-to-back alpha compositing of depth-sorted 2D Gaussians, tile by
    tile (3D Gaussian splatting; gsplat's `rasterize_to_pixels`, classic mode).

    Pixel (row i, column j) has its centre at (j + 0.5, i + 0.5) and reads the
    Gaussians of its tile (tile_size x tile_size pixels), front to back: with
    d = means2d - centre and sigma = 0.5 (a dx^2 + c dy^2) + b dx dy, a
    Gaussian is skipped where sigma < 0 or alpha = min(0.99, opacity
    exp(-sigma)) < 1/255; the pixel stops before the Gaussian that would take
    its transmittance T to 1e-4 or below; each other one adds alpha T colour
    and multiplies T by 1 - alpha.

    Args:
      means2d: [N, 2] float32 centres in pixels (u right, v down).
      conics: [N, 3] float32 inverse 2D covariances (a, b, c) = (inv[0, 0],
        inv[0, 1], inv[1, 1]).
      colors: [N, C] float32, C >= 1.
      opacities: [N] float32, in [0, 1].
      background: [C] float32, added as T * background.
      gaussian_ids: [M] int32, the Gaussians of tile 0 front to back, then of
        tile 1, ... (the tile binning's output), each that a tile's range
        covers in [0, N); no entry outside the ranges is read
        (gaussian_tile_bin_static's -1 padding).
      tile_ranges: [tiles_y * tiles_x, 2] int32, tile t's Gaussians are
        gaussian_ids[start:end]; tile t = ty * tiles_x + tx, tiles_x =
        ceil(width / tile_size), tiles_y = ceil(height / tile_size).
      width, height: the image's size in pixels, 1 to 65536.
      tile_size: pixels per tile side, 1 to 32 (16, as the binning).

    Returns (image [height, width, C], alpha [height, width]) float32, alpha =
    1 - the final T. Differentiable w.r.t. means2d, conics, colors, opacities
    and background (the index inputs get none). Bad shapes, ids outside
    [0, N) and ranges outside gaussian_ids are errors naming the argument
    (the values are checked by the CPU kernels; the CUDA kernels skip them).
    XLA compiles the op and its gradient (`tf.function(jit_compile=True)`),
    on the CPU and on CUDA.
    """
    with tf.name_scope(name or "gaussian_rasterize"):
        attrs = op_attrs("gaussian_rasterize", "MetalOpsGaussianRasterize", width=width, height=height,
                         tile_size=tile_size)
        values = (means2d, conics, colors, opacities, background, gaussian_ids, tile_ranges)
        tensors = [float_tensor("gaussian_rasterize", n, v) for n, v in zip(_FLOATS, values)]
        tensors += [float_tensor("gaussian_rasterize", n, v, (tf.int32,)) for n, v in zip(_INDICES, values[5:])]
        image, alpha, _ = load_library().metal_ops_gaussian_rasterize(*tensors, **attrs)
        return image, alpha


@tf.RegisterGradient("MetalOpsGaussianRasterize")
def _gaussian_rasterize_grad(op, grad_image, grad_alpha, _grad_last_ids):
    _, alpha, last_ids = op.outputs
    grad_image = tf.zeros_like(op.outputs[0]) if grad_image is None else grad_image
    grad_alpha = tf.zeros_like(alpha) if grad_alpha is None else grad_alpha
    grads = load_library().metal_ops_gaussian_rasterize_grad(
        *op.inputs, alpha, last_ids, grad_image, grad_alpha, width=op.get_attr("width"),
        height=op.get_attr("height"), tile_size=op.get_attr("tile_size"))
    return list(grads) + [None, None]


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): one and three
    channels, an image not a multiple of the tile, a tile size of 8, no
    Gaussian at all."""
    import numpy as np

    from metal_ops import selftest
    from metal_ops._reference import gaussian_rasterize as ref

    rng, out = selftest.rng("gaussian_rasterize"), []
    for n, c, width, height, tile_size in [(60, 3, 37, 29, 16), (40, 1, 20, 24, 8), (0, 3, 17, 5, 16)]:
        inputs = ref.scene(rng, n, c, width, height, tile_size)
        attrs = {"width": width, "height": height, "tile_size": tile_size}
        out.append(selftest.case("gaussian_rasterize", f"N={n} C={c} {width}x{height} tile {tile_size}", np.float32,
                                 inputs, lambda *x, a=attrs: gaussian_rasterize(*x, **a), 1e-4, attrs))
    return out
