"""ZeroOut: the tutorial op (kernels/zero_out/zero_out_op.cc; its declaration and element rule:
kernels/zero_out/zero_out.h). docs/ZERO_OUT.md describes the op."""
import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs
from metal_ops._loader import load_library


def zero_out(x, preserve_index=0, name=None):
    """Zeros every element of `x` except the one at flat index `preserve_index`.

    `x`: int32, int64, float32 or float64 (another dtype is a TypeError;
    Python data: int32 or float32). Returns x's shape and dtype. Raises
    InvalidArgumentError when `preserve_index` is outside a non-empty `x`.
    """
    attrs = op_attrs("zero_out", "ZeroOut", preserve_index=preserve_index)
    x = float_tensor("zero_out", "x", x, (tf.int32, tf.int64, tf.float32, tf.float64))
    return load_library().zero_out(x, name=name, **attrs)


@tf.RegisterGradient("ZeroOut")
def _zero_out_grad(op, grad):
    # Only the preserved element passes its gradient through, which is ZeroOut
    # applied to the incoming gradient.
    return [load_library().zero_out(grad, preserve_index=op.get_attr("preserve_index"))]


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest): float32 and the
    integer types; the integer cases forward only."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("zero_out"), []
    for dtype in (np.float32, np.int32, np.int64):
        for shape, preserve in [((7,), 3), ((3, 5, 2), 29), ((0, 4), 9), ((1_000_003,), 1_000_002)]:
            x = (rng.standard_normal(shape) * 100).astype(dtype)
            out.append(selftest.case("zero_out", f"shape={shape} preserve={preserve}", dtype, [x],
                                     lambda v, p=preserve: zero_out(v, preserve_index=p), 0.0,
                                     {"preserve_index": preserve}, differentiable=dtype == np.float32))
    return out
