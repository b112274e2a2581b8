"""Multiresolution hash encoding (instant-NGP): wrapper and gradients.

Ops: MetalOpsHashEncode, MetalOpsHashEncodeGrad, MetalOpsHashEncodeGradGrad,
MetalOpsHashGridOffsets (kernels/hash_encode/hash_encode_op.cc). Formulas:
kernels/common/hash_grid.h. Semantics and limits: docs/HASH_ENCODE.md.
"""
import functools
import math

import tensorflow as tf

from metal_ops._args import float_tensor, invalid_argument, number, op_attrs, spec_errors
from metal_ops._loader import load_library

_GRID_ATTRS = ("num_levels", "log2_hashmap_size", "base_resolution", "per_level_scale", "interpolation", "out_of_range")


@functools.lru_cache(maxsize=256)
def _grid_offsets(input_dim, num_levels, log2_hashmap_size, base_resolution, per_level_scale):
    # Computed by the op (hash_grid::level_offsets), eagerly even inside a
    # tf.function, so Python holds no copy of the formula.
    with tf.init_scope(), spec_errors(error=invalid_argument):
        offsets = load_library().metal_ops_hash_grid_offsets(
            input_dim=input_dim,
            num_levels=num_levels,
            log2_hashmap_size=log2_hashmap_size,
            base_resolution=base_resolution,
            per_level_scale=per_level_scale,
        )
        return tuple(int(v) for v in offsets.numpy())


# instant-NGP's NeRF grid: the defaults of hash_encode, hash_grid_size and
# layers.HashEncoding.
DEFAULT_GRID = dict(num_levels=16, log2_hashmap_size=19, base_resolution=16, finest_resolution=2048)


def per_level_scale_for(num_levels, base_resolution, finest_resolution):
    """instant-NGP's growth per level: exp(ln(finest_resolution / base_resolution) /
    (num_levels - 1)), 1 for one level (NaN for a non-positive ratio: the op
    refuses it, naming per_level_scale)."""
    ratio = float(finest_resolution) / float(base_resolution) if base_resolution else float("nan")
    if not ratio > 0:
        return float("nan")
    return 1.0 if int(num_levels) == 1 else math.exp(math.log(ratio) / (int(num_levels) - 1))


def _grid_attrs(owner, op_name, num_levels, log2_hashmap_size, base_resolution, per_level_scale, finest_resolution,
                **others):
    """The grid's attributes of `op_name`, checked (metal_ops._args.op_attrs), per_level_scale
    computed from finest_resolution when it is None."""
    attrs = op_attrs(owner, op_name, num_levels=num_levels, log2_hashmap_size=log2_hashmap_size,
                     base_resolution=base_resolution, **others)
    if per_level_scale is None:
        per_level_scale = per_level_scale_for(attrs["num_levels"], attrs["base_resolution"],
                                              number(owner, "finest_resolution", finest_resolution))
    attrs.update(op_attrs(owner, op_name, per_level_scale=per_level_scale))
    return attrs


def hash_grid_offsets(input_dim, num_levels=DEFAULT_GRID["num_levels"],
                      log2_hashmap_size=DEFAULT_GRID["log2_hashmap_size"],
                      base_resolution=DEFAULT_GRID["base_resolution"], per_level_scale=None,
                      finest_resolution=DEFAULT_GRID["finest_resolution"]):
    """Row offsets of every level: a tuple of num_levels + 1 ints, the last one
    being hash_grid_size(...). The arguments are hash_encode's."""
    attrs = _grid_attrs("hash_grid_size", "MetalOpsHashGridOffsets", num_levels, log2_hashmap_size, base_resolution,
                        per_level_scale, finest_resolution, input_dim=input_dim)
    return _grid_offsets(attrs["input_dim"], attrs["num_levels"], attrs["log2_hashmap_size"],
                         attrs["base_resolution"], attrs["per_level_scale"])


def hash_grid_size(input_dim, num_levels=DEFAULT_GRID["num_levels"],
                   log2_hashmap_size=DEFAULT_GRID["log2_hashmap_size"],
                   base_resolution=DEFAULT_GRID["base_resolution"], per_level_scale=None,
                   finest_resolution=DEFAULT_GRID["finest_resolution"]):
    """Number of table rows P of a hash grid (tiny-cuda-nn's formula: each
    level has min(next_multiple_of_8(resolution^D), 2^log2_hashmap_size) rows).
    The arguments and defaults are hash_encode's.

    The table of `hash_encode` is [P, F]; the parameter count is P * F.
    """
    return hash_grid_offsets(input_dim, num_levels, log2_hashmap_size, base_resolution, per_level_scale,
                             finest_resolution)[-1]


def hash_encode(inputs, table, *, num_levels=DEFAULT_GRID["num_levels"],
                log2_hashmap_size=DEFAULT_GRID["log2_hashmap_size"], base_resolution=DEFAULT_GRID["base_resolution"],
                per_level_scale=None, finest_resolution=DEFAULT_GRID["finest_resolution"], interpolation="linear",
                out_of_range="clamp", name=None):
    """Multiresolution hash encoding of `inputs` with the feature `table`.

    The defaults are instant-NGP's NeRF grid, those of layers.HashEncoding.

    Args:
      inputs: [N, D] float32 coordinates, D in 1..4, nominally in [0, 1].
      table: [P, F] float32 or float16 features, F in {1, 2, 4, 8},
        P = hash_grid_size(D, num_levels, log2_hashmap_size, base_resolution,
        per_level_scale, finest_resolution). Row layout of tiny-cuda-nn / instant-NGP.
      num_levels: 1..32. log2_hashmap_size: 1..30. base_resolution: >= 1.
      per_level_scale: >= 1, the resolution's growth per level; None:
        instant-NGP's exp(ln(finest_resolution / base_resolution) /
        (num_levels - 1)) (metal_ops.hash_encode's module function
        per_level_scale_for).
      finest_resolution: the last level's resolution; used only when
        per_level_scale is None.
      interpolation: "linear" or "smoothstep".
      out_of_range: "clamp" (coordinates clamped to [0, 1], zero input
        gradient where clamped), "wrap" (tiny-cuda-nn: no clamp, cells wrap
        around through uint32), "zero" (points outside [0, 1]^D encode to zero
        with zero gradients). In every mode a NaN or infinite coordinate gives
        a zero row and zero gradients.

    Returns:
      [N, num_levels * F] in the table's dtype; level l's features at columns
      l*F .. l*F+F-1. Arithmetic and accumulation are float32.

    The op checks every argument (kernels/hash_encode/hash_encode.h), naming it.
    Gradients flow to `table` (float32 accumulation, deterministic on CPU) and
    to `inputs`; the input gradient is skipped when the tape knows it is not
    needed. Second derivatives: d(input gradient)/d(table) and
    d(input gradient)/d(upstream gradient) are implemented (eikonal losses);
    second derivatives with respect to `inputs` are not (treated as zero).
    """
    lib = load_library()
    with tf.name_scope(name or "hash_encode"):
        attrs = _grid_attrs("hash_encode", "MetalOpsHashEncode", num_levels, log2_hashmap_size, base_resolution,
                            per_level_scale, finest_resolution, interpolation=interpolation,
                            out_of_range=out_of_range)
        inputs = float_tensor("hash_encode", "inputs", inputs)
        table = float_tensor("hash_encode", "table", table, (tf.float32, tf.float16))
        return lib.metal_ops_hash_encode(inputs, table, **attrs)


def _op_attrs(op):
    attrs = {}
    for key in _GRID_ATTRS:
        value = op.get_attr(key)
        if isinstance(value, bytes):
            value = value.decode()
        attrs[key] = value
    return attrs


def _skipped(op):
    # Eager tapes and GradientTape inside tf.function tell the gradient function
    # which inputs need no gradient (op.skip_input_indices); tf.gradients does not.
    skip = getattr(op, "skip_input_indices", None)
    return None if skip is None else set(skip)


@tf.RegisterGradient("MetalOpsHashEncode")
def _hash_encode_grad(op, grad):
    lib = load_library()
    inputs, table = op.inputs[0], op.inputs[1]
    attrs = _op_attrs(op)
    skip = _skipped(op)
    if skip is not None:
        need_inputs, need_table = 0 not in skip, 1 not in skip
        grad_table, grad_inputs = lib.metal_ops_hash_encode_grad(
            grad, inputs, table, compute_table_grad=need_table, compute_input_grad=need_inputs, **attrs)
        return [grad_inputs if need_inputs else None, grad_table if need_table else None]
    # tf.gradients: two ops, each computing one gradient; the one whose result
    # is not consumed is pruned from the graph (the ops are stateless).
    grad_table, _ = lib.metal_ops_hash_encode_grad(
        grad, inputs, table, compute_table_grad=True, compute_input_grad=False, **attrs)
    _, grad_inputs = lib.metal_ops_hash_encode_grad(
        grad, inputs, table, compute_table_grad=False, compute_input_grad=True, **attrs)
    return [grad_inputs, grad_table]


@tf.RegisterGradient("MetalOpsHashEncodeGrad")
def _hash_encode_grad_grad(op, grad_of_grad_table, grad_of_grad_inputs):
    """Second order. grad_table and grad_inputs are linear in grad_encoded:
    d/dgrad_encoded of <G, grad_table> is the forward encoding of G, and the
    adjoint of grad_inputs is MetalOpsHashEncodeGradGrad. Derivatives with
    respect to `inputs` are not implemented (returned as None, i.e. zero)."""
    lib = load_library()
    dy, inputs, table = op.inputs[0], op.inputs[1], op.inputs[2]
    attrs = _op_attrs(op)
    d_dy = None
    d_table = None
    if op.get_attr("compute_table_grad") and grad_of_grad_table is not None:
        d_dy = lib.metal_ops_hash_encode(inputs, tf.cast(grad_of_grad_table, table.dtype), **attrs)
    if op.get_attr("compute_input_grad") and grad_of_grad_inputs is not None:
        d_table, d_dy_x = lib.metal_ops_hash_encode_grad_grad(grad_of_grad_inputs, dy, inputs, table, **attrs)
        d_dy = d_dy_x if d_dy is None else d_dy + d_dy_x
    return [d_dy, None, d_table]


@tf.RegisterGradient("MetalOpsHashEncodeGradGrad")
def _hash_encode_grad_grad_grad(op, *unused):
    raise NotImplementedError("metal_ops.hash_encode: third derivatives are not implemented")


tf.no_gradient("MetalOpsHashGridOffsets")


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest)."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("hash_encode"), []
    for dtype, tol in [(np.float32, 1e-4), (np.float16, 2e-2)]:
        for n, dims, levels, log2_size in [(1001, 3, 8, 12), (0, 3, 8, 12), (333, 2, 4, 10), (65536, 3, 16, 19)]:
            grid = dict(num_levels=levels, log2_hashmap_size=log2_size, base_resolution=16 if levels == 16 else 4,
                        per_level_scale=1.5)
            rows = hash_grid_size(input_dim=dims, **grid)
            x = rng.uniform(0, 1, (n, dims)).astype(np.float32)
            table = (rng.standard_normal((rows, 2)) * 1e-2).astype(dtype)
            out.append(selftest.case("hash_encode", f"n={n} dims={dims} levels={levels}", dtype, [x, table],
                                     lambda a, b, g=grid: hash_encode(a, b, **g), tol, grid))
    return out
