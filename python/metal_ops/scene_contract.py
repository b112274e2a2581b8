"""Scene contraction of unbounded scenes, mip-NeRF 360's (kernels/scene_contract/scene_contract_op.cc).

The op's declaration, formula, derivative and checks live once in
kernels/scene_contract/scene_contract.h (CPU, CUDA and Metal kernels); the
norm's choices are read from the registered op (metal_ops._opdef).
docs/SCENE_CONTRACT.md describes the op.
"""
import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs, register_gradient_op
from metal_ops._loader import load_library

register_gradient_op("MetalOpsSceneContract", "metal_ops_scene_contract_grad")


def scene_contract(x, norm="l2", name=None):
    """Contracts points of an unbounded scene into a ball (or cube) of radius 2.

    mip-NeRF 360's contraction (Barron et al. 2022, eq. 10): x where
    ||x|| <= 1, else (2 - 1 / ||x||) x / ||x||, so the unit ball is kept as it
    is and everything beyond it is squeezed into the shell 1 < ||y|| < 2,
    distant points closer together, before a hash encoding of [-2, 2]^3.

    Args:
      x: [..., 3] float32 or float16 points (computed in float32, returned in
        x's dtype).
      norm: "l2" (mip-NeRF 360's ball) or "linf" (instant-NGP's and nerfacc's
        cube: max |x_i|).

    Returns x's shape and dtype, every coordinate in [-2, 2]. A point with an
    infinite coordinate goes to the limit on the boundary (gradient 0); one
    with a NaN to NaN. Differentiable w.r.t. x (one fused backward op; no
    second derivatives).
    """
    with tf.name_scope(name or "scene_contract"):
        attrs = op_attrs("scene_contract", "MetalOpsSceneContract", norm=norm)
        x = float_tensor("scene_contract", "x", x, (tf.float32, tf.float16))
        return load_library().metal_ops_scene_contract(x, **attrs)


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): radii from about
    0.1 to 100, both branches of the contraction, with each norm."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("scene_contract"), []
    for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
        for shape, norm in [((1001, 3), "l2"), ((1001, 3), "linf"), ((2, 7, 3), "l2"), ((0, 3), "linf"),
                            ((65536, 3), "l2")]:
            x = (rng.normal(size=shape) * np.exp(rng.uniform(-2, 4.5, shape[:-1] + (1,)))).astype(dtype)
            out.append(selftest.case("scene_contract", f"shape={shape} norm={norm}", dtype, [x],
                                     lambda v, k=norm: scene_contract(v, norm=k), tol, {"norm": norm}))
    return out
