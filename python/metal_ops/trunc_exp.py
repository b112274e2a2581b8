"""Truncated exponential, instant-NGP's density activation (kernels/trunc_exp/trunc_exp_op.cc).

The formula lives once in kernels/common/activations.h (FusedMLP's "trunc_exp"
output activation), used through kernels/trunc_exp/trunc_exp.h by the CPU, CUDA
and Metal kernels, with the op's declaration and checks.
docs/TRUNC_EXP.md describes the op.
"""
import tensorflow as tf

from metal_ops._args import float_tensor, register_gradient_op
from metal_ops._loader import load_library

register_gradient_op("MetalOpsTruncExp", "metal_ops_trunc_exp_grad")


def trunc_exp(x, name=None):
    """exp(x) whose gradient is dy * exp(clip(x, -15, 15)).

    instant-NGP's density activation: the forward value is exp(x) (inf above
    x ~ 88.7 in float32, ~ 11.1 in float16), the slope is clamped to
    [e^-15, e^15], so a density logit far from 0 neither stops learning nor
    takes a huge step.

    Args:
      x: float32 or float16 tensor of any shape (computed in float32, returned
        in x's dtype).

    Returns exp(x), x's shape and dtype. Differentiable (one fused backward op;
    no second derivatives).
    """
    with tf.name_scope(name or "trunc_exp"):
        return load_library().metal_ops_trunc_exp(float_tensor("trunc_exp", "x", x, (tf.float32, tf.float16)))


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): both sides of the
    gradient's clamp at +-15; float16's exp stays finite below 11."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("trunc_exp"), []
    for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
        for shape in [(1001,), (3, 7, 5), (0, 4), (65536, 16)]:
            lo, hi = (-20.0, 20.0) if dtype == np.float32 else (-18.0, 10.0)
            x = rng.uniform(lo, hi, shape).astype(dtype)
            out.append(selftest.case("trunc_exp", f"shape={shape}", dtype, [x], trunc_exp, tol))
    return out
