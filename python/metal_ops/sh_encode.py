"""Real spherical-harmonics encoding of directions (kernels/sh_encode/sh_encode_op.cc).

The op's declaration, polynomials, derivatives and checks live once in
kernels/sh_encode/sh_encode.h (CPU, CUDA and Metal kernels).
docs/SH_ENCODE.md describes the op.
"""
import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs, register_gradient_op
from metal_ops._loader import load_library

register_gradient_op("MetalOpsSHEncode", "metal_ops_sh_encode_grad")


def sh_encode(dirs, degree=4, name=None):
    """Real spherical harmonics Y_0 .. Y_{degree**2 - 1} of directions.

    The values, their order and normalisation are instant-NGP's, and those of
    the NeRF sample's 16-op TF `sh_encode` (examples/nerf/model.py): for
    (x, y, z), 0.2821, -0.4886 y, 0.4886 z, -0.4886 x, 1.0925 xy, ...

    Args:
      dirs: [..., 3] float32 or float16 directions (computed in float32,
        returned in dirs' dtype). Used as given, not normalised, exactly as the
        TF version: pass unit vectors for true spherical harmonics.
      degree: number of bands, 1 to 4 (1, 4, 9 or 16 values per direction).

    Returns [..., degree**2] in dirs' dtype. Differentiable w.r.t. dirs (one
    fused backward op; no second derivatives).
    """
    with tf.name_scope(name or "sh_encode"):
        attrs = op_attrs("sh_encode", "MetalOpsSHEncode", degree=degree)
        dirs = float_tensor("sh_encode", "dirs", dirs, (tf.float32, tf.float16))
        return load_library().metal_ops_sh_encode(dirs, **attrs)


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): every degree."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("sh_encode"), []
    for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
        for shape, degree in [((1001, 3), 1), ((1001, 3), 2), ((1001, 3), 3), ((2, 5, 3), 4), ((0, 3), 4),
                              ((65536, 3), 4)]:
            d = rng.normal(size=shape).astype(dtype)
            out.append(selftest.case("sh_encode", f"shape={shape} degree={degree}", dtype, [d],
                                     lambda v, k=degree: sh_encode(v, degree=k), tol, {"degree": degree}))
    return out
