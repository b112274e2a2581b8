"""`python -m metal_ops.selftest`: every op of this library on each GPU device
TensorFlow lists, checked against the same op on the CPU; on a machine with
no GPU, the CPU kernels checked against the independent NumPy references the
package ships (metal_ops._reference, one per op).

For each op, dtype (float32, float16 where the op has it, the integer types of
ZeroOut) and shape (odd sizes, empty tensors, one large case), it runs the
forward pass and the gradients of sum(cotangent * output) with respect to
every input (forward only where marked: integer ZeroOut, a convolution with
no input channel) on the GPU and on the CPU, and prints one table: op, case, dtype,
device, the largest error against the CPU, the tolerance, pass/fail, and the
time of one forward + backward pass with the results read back to the host
(the fastest of --repeat runs, after one warm-up run) on each. Exit status 1
when any case fails or raises, 0 otherwise.

Where TensorFlow lists no GPU it says so and runs the cases on /CPU:0
against the float64 references of metal_ops._reference, with the same
table, tolerances and exit status: what a CPU-only installation runs (the
float32 and integer cases: the float16 tolerances are for one op on two
devices, not against float64; RayMarchStatic's CPU kernel outside XLA as
well as under it; the large RayMarch and RayMarchStatic cases with
CPU_ONLY_MARCH_RAYS rays, as their reference marches in Python).

On a CUDA GPU, TensorFlow keeps int32 tensors in host memory, so the int32
ZeroOut cases must run on the host CPU there (the report says so); the float32
and int64 cases check the CUDA kernel. TF32 is turned off for the run: the
gradients of FusedConv2D go through TensorFlow's own GPU convolutions.

The error of a case is the largest, over every output and gradient element,
of |device - cpu| / max(1, |cpu|); NaN where the other side has a number, a
missing gradient or a shape mismatch count as infinite. float16 FusedMLP,
which has no CPU kernel, is compared with a float64 NumPy model on the same
float16 inputs, elementwise within the error bound of its float16 kernels
(docs/FUSED_MLP_GPU.md, "float16 error bound"): its error is the largest
|device - reference| / bound, its tolerance 1.

Where XLA can compile an op in this process (metal_ops._loader.has_xla_kernels:
host handlers, and CUDA handlers where a GPU is listed), the ops with XLA
kernels run every case a second time inside tf.function(jit_compile=True) (the case's label
ends in "[xla]"), compared with the same CPU reference (docs/XLA.md).

RayMarch, whose samples are discrete decisions at cell boundaries that one
ulp of rounding can flip, is compared ray by ray instead (compare_ray_march:
each side's packing, the samples of the rays that did not flip, limits on
the few that did). RayMarchStatic, which runs on a GPU only under XLA, has
[xla] cases only, compared with the same XLA function on the CPU: each
side's padding and layout exactly, then the rays both kept ray by ray
(compare_ray_march_static).

METAL_OPS_GPU_SYNC=1 is set before the op library is loaded: in that mode
every Metal op commits its command buffer, waits for it and turns a GPU-side
error into a TensorFlow error naming the op and kernel, so a fault shows up
in the case that caused it. On a Mac, run it with Metal's shader validation:

    MTL_SHADER_VALIDATION=1 python -m metal_ops.selftest --json report.json

`--json FILE` writes the table with the versions of TensorFlow,
tensorflow-metal, the OS, the devices and this build, to attach to a bug
report. It needs only the installed package (no tests/ folder).
"""
import argparse
import collections
import functools
import json
import math
import os
import platform
import sys
import time
import zlib

import numpy as np

SYNC_ENV = "METAL_OPS_GPU_SYNC"

# check: None, or (case, outputs, gradients) -> (error, note) in place of the CPU reference.
Case = collections.namedtuple("Case", "op label dtype inputs call tolerance attrs differentiable check")


def _case(op, label, dtype, inputs, call, tolerance, attrs=None, differentiable=True, check=None):
    return Case(op, label, np.dtype(dtype).name, inputs, call, tolerance, attrs or {}, differentiable, check)


# ---- the cases -------------------------------------------------------------------------------

def _rays(rng, r, s):
    sigma = rng.uniform(0, 5, (r, s)).astype(np.float32)
    rgb = rng.uniform(0, 1, (r, s, 3)).astype(np.float32)
    t = np.cumsum(rng.uniform(0.01, 0.1, (r, s + 1)), axis=1).astype(np.float32)
    return sigma, rgb, t


def _march_case(rng, r, g, cascades, cone, jitter):
    """RayMarch's inputs (r rays from around an occupancy grid of `cascades`
    cascades of g^3 cells, seed 7) and attributes; RayMarchStatic takes the
    same with a sample_budget."""
    from metal_ops.ray_march import pack_occupancy

    origins = rng.uniform(-3, 3, (r, 3)).astype(np.float32)
    dirs = (rng.uniform(-1, 2, (r, 3)) - origins).astype(np.float32)
    dirs /= np.maximum(np.linalg.norm(dirs, axis=1, keepdims=True), 1e-6)
    near = np.zeros(r, np.float32)
    far = np.full(r, 10.0, np.float32)
    bits = pack_occupancy(rng.uniform(size=(cascades, g, g, g)) < 0.3).numpy()
    attrs = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.01, cone_angle=cone,
                 max_step_size=0.1, jitter=jitter)
    return [origins, dirs, near, far, bits, np.int32(7)], attrs


def _mlp(rng, in_dim, width, hidden, out_dim, dtype):
    dims = [in_dim] + [width] * hidden + [out_dim]
    ws = [(rng.uniform(-1, 1, (a, b)) / np.sqrt(a)).astype(dtype) for a, b in zip(dims[:-1], dims[1:])]
    bs = [rng.uniform(-0.1, 0.1, b).astype(dtype) for b in dims[1:]]
    return ws, bs


# The rays of the large RayMarch and RayMarchStatic cases on a machine without a
# GPU: their reference marches ray by ray in Python (about a millisecond a ray).
CPU_ONLY_MARCH_RAYS = 2048


def cases(ops=None, cpu_only=False):
    """Every case, in table order; `ops` limits them to those op names.
    `cpu_only`: the cases of a machine without a GPU (see above)."""
    import metal_ops

    out = []

    def wanted(op):
        # Each op draws from its own generator: its inputs are the same whichever ops are selected.
        return (ops is None or op in ops), np.random.default_rng(zlib.crc32(op.encode()))

    use, rng = wanted("zero_out")
    if use:
        for dtype in (np.float32, np.int32, np.int64):
            for shape, preserve in [((7,), 3), ((3, 5, 2), 29), ((0, 4), 9), ((1_000_003,), 1_000_002)]:
                x = (rng.standard_normal(shape) * 100).astype(dtype)
                out.append(_case("zero_out", f"shape={shape} preserve={preserve}", dtype, [x],
                                 lambda v, p=preserve: metal_ops.zero_out(v, preserve_index=p), 0.0,
                                 {"preserve_index": preserve}, differentiable=dtype == np.float32))

    use, rng = wanted("volume_render")
    if use:
        # validate=False: the launch without the check's read-back (CUDA)
        for r, s, weights, check in [(37, 19, True, True), (0, 16, True, True), (8, 0, False, True),
                                     (4096, 64, False, True), (4096, 64, True, False)]:
            out.append(_case("volume_render", f"rays={r} samples={s} weights={weights}" + ("" if check else
                                                                                            " validate=False"),
                             np.float32, list(_rays(rng, r, s)),
                             lambda a, b, c, w=weights, v=check: metal_ops.volume_render(a, b, c, return_weights=w,
                                                                                         validate=v), 1e-4,
                             {"return_weights": weights, "validate": check}))

    use, rng = wanted("packed_volume_render")
    if use:
        for r, mean, weights, check in [(37, 9, True, True), (0, 4, True, True), (6, 0, False, True),
                                        (4096, 24, False, True), (4096, 24, True, False)]:
            counts = rng.integers(0, 2 * mean + 1, r).astype(np.int32)
            offsets = (np.cumsum(counts) - counts).astype(np.int32)
            n = int(counts.sum())
            sigma = rng.uniform(0, 5, n).astype(np.float32)
            rgb = rng.uniform(0, 1, (n, 3)).astype(np.float32)
            t_starts = rng.uniform(2, 6, n).astype(np.float32)
            for o, c in zip(offsets, counts):
                t_starts[o:o + c] = np.sort(t_starts[o:o + c])  # sorted per ray, as ray_march gives them
            t_ends = (t_starts + rng.uniform(0, 0.05, n)).astype(np.float32)
            out.append(_case("packed_volume_render", f"rays={r} samples={n} weights={weights}" + ("" if check else
                                                                                                   " validate=False"),
                             np.float32, [sigma, rgb, t_starts, t_ends, offsets, counts],
                             lambda a, b, c, d, e, f, w=weights, v=check: metal_ops.packed_volume_render(
                                 a, b, c, d, e, f, return_weights=w, validate=v), 1e-4,
                             {"return_weights": weights, "validate": check}))

    use, rng = wanted("distortion_loss")
    if use:
        for r, s in [(37, 19), (0, 4), (5, 0), (4096, 64)]:
            _, _, t = _rays(rng, r, s)
            w = rng.uniform(0, 1, (r, s)).astype(np.float32)
            out.append(_case("distortion_loss", f"rays={r} samples={s}", np.float32, [w, t], metal_ops.distortion_loss,
                             1e-4))

    use, rng = wanted("ray_march")
    if use:
        # Sample positions: integer outputs compared exactly, no gradient.
        for r, g, cascades, cone, jitter in [(301, 16, 1, 0.0, False), (0, 8, 1, 0.0, False),
                                             (65536, 64, 2, 0.01, True)]:
            r = min(r, CPU_ONLY_MARCH_RAYS) if cpu_only else r
            inputs, attrs = _march_case(rng, r, g, cascades, cone, jitter)
            out.append(_case("ray_march", f"rays={r} G={g} C={cascades} cone={cone} jitter={jitter}", np.float32,
                             inputs,
                             lambda o, d, n, f, b, s, a=attrs: tuple(metal_ops.ray_march(o, d, n, f, b, seed=s, **a)),
                             1e-5, attrs, differentiable=False))

    # RayMarchStatic runs on a GPU under XLA only (outside XLA it has a CPU
    # kernel only): its cases are [xla] cases (below), compared with the
    # same XLA function on the CPU (the host handler) by compare_ray_march_static.
    xla_only = []
    use, rng = wanted("ray_march_static")
    if use:
        # Budgets: above the total (padding), below it (rays cut), none.
        for r, g, cascades, cone, jitter, budget in [(301, 16, 1, 0.0, False, 20000), (301, 16, 1, 0.0, True, 1500),
                                                      (0, 8, 1, 0.0, False, 64), (17, 8, 1, 0.0, False, 0),
                                                      (65536, 64, 2, 0.01, True, 1 << 20)]:
            r = min(r, CPU_ONLY_MARCH_RAYS) if cpu_only else r
            inputs, attrs = _march_case(rng, r, g, cascades, cone, jitter)
            attrs["sample_budget"] = budget
            xla_only.append(_case(
                "ray_march_static", f"rays={r} G={g} C={cascades} cone={cone} jitter={jitter} budget={budget}",
                np.float32, inputs,
                lambda o, d, n, f, b, s, a=attrs: tuple(metal_ops.ray_march_static(o, d, n, f, b, seed=s, **a)),
                1e-5, attrs, differentiable=False))

    use, rng = wanted("robust_loss")
    if use:
        for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
            for shape, channels in [((257, 8), 8), ((0, 8), 8), ((4, 3), 1), ((65536, 3), 3)]:
                x = rng.standard_normal(shape).astype(dtype)
                alpha = rng.uniform(-3, 3, (channels,)).astype(np.float32)
                scale = rng.uniform(0.5, 2, (channels,)).astype(np.float32)
                out.append(_case("robust_loss", f"shape={shape} channels={channels}", dtype, [x, alpha, scale],
                                 metal_ops.robust_loss, tol))

    use, rng = wanted("sh_encode")
    if use:
        for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
            for shape, degree in [((1001, 3), 1), ((1001, 3), 2), ((1001, 3), 3), ((2, 5, 3), 4), ((0, 3), 4),
                                  ((65536, 3), 4)]:
                d = rng.normal(size=shape).astype(dtype)
                out.append(_case("sh_encode", f"shape={shape} degree={degree}", dtype, [d],
                                 lambda v, k=degree: metal_ops.sh_encode(v, degree=k), tol, {"degree": degree}))

    use, rng = wanted("scene_contract")
    if use:
        for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
            for shape, norm in [((1001, 3), "l2"), ((1001, 3), "linf"), ((2, 7, 3), "l2"), ((0, 3), "linf"),
                                ((65536, 3), "l2")]:
                # Radii from ~0.1 to ~100: both branches of the contraction.
                x = (rng.normal(size=shape) * np.exp(rng.uniform(-2, 4.5, shape[:-1] + (1,)))).astype(dtype)
                out.append(_case("scene_contract", f"shape={shape} norm={norm}", dtype, [x],
                                 lambda v, k=norm: metal_ops.scene_contract(v, norm=k), tol, {"norm": norm}))

    use, rng = wanted("trunc_exp")
    if use:
        for dtype, tol in [(np.float32, 1e-4), (np.float16, 1e-2)]:
            for shape in [(1001,), (3, 7, 5), (0, 4), (65536, 16)]:
                # Both sides of the gradient's clamp at +-15; float16's exp stays finite below 11.
                lo, hi = (-20.0, 20.0) if dtype == np.float32 else (-18.0, 10.0)
                x = rng.uniform(lo, hi, shape).astype(dtype)
                out.append(_case("trunc_exp", f"shape={shape}", dtype, [x], metal_ops.trunc_exp, tol))

    use, rng = wanted("hash_encode")
    if use:
        for dtype, tol in [(np.float32, 1e-4), (np.float16, 2e-2)]:
            for n, dims, levels, log2_size in [(1001, 3, 8, 12), (0, 3, 8, 12), (333, 2, 4, 10), (65536, 3, 16, 19)]:
                grid = dict(num_levels=levels, log2_hashmap_size=log2_size, base_resolution=16 if levels == 16 else 4,
                            per_level_scale=1.5)
                rows = metal_ops.hash_grid_size(input_dim=dims, **grid)
                x = rng.uniform(0, 1, (n, dims)).astype(np.float32)
                table = (rng.standard_normal((rows, 2)) * 1e-2).astype(dtype)
                out.append(_case("hash_encode", f"n={n} dims={dims} levels={levels}", dtype, [x, table],
                                 lambda a, b, g=grid: metal_ops.hash_encode(a, b, **g), tol, grid))

    use, rng = wanted("fused_conv2d")
    if use:
        # No input channel: the output is activation(bias + residual); forward
        # only, as TensorFlow's Conv2DBackpropInput rejects a zero-depth filter.
        # The large case's filter gradient (TensorFlow's Conv2DBackpropFilter, not this
        # library's kernel) runs the cuDNN algorithm that autotuning picks in the
        # process, and their float32 errors differ (docs/BUILDING.md, "TensorFlow's
        # CUDA build on a machine without network"): its tolerance covers them.
        for shape, cin, cout, activation, tol in [((2, 9, 9), 4, 5, "relu", 1e-3), ((2, 9, 9), 0, 5, "sigmoid", 1e-3),
                                                  ((4, 64, 64), 16, 32, "relu", 5e-3)]:
            x = rng.standard_normal(shape + (cin,)).astype(np.float32)
            w = rng.standard_normal((3, 3, cin, cout)).astype(np.float32)
            b = rng.standard_normal((cout,)).astype(np.float32)
            res = rng.standard_normal(shape + (cout,)).astype(np.float32)
            out.append(_case("fused_conv2d", f"x={shape + (cin,)} cout={cout} {activation}", np.float32, [x, w, b, res],
                             lambda a, f, bb, rr, act=activation: metal_ops.fused_conv2d(a, f, bias=bb, residual=rr,
                                                                                         activation=act), tol,
                             {"activation": activation}, differentiable=cin > 0))

    use, rng = wanted("fused_mlp")
    if use:
        for dtype, tol, n, in_dim, width, hidden, out_dim, act, out_act in [
                (np.float32, 1e-3, 1001, 31, 64, 2, 3, "relu", "sigmoid"),
                (np.float32, 1e-3, 0, 31, 64, 2, 3, "relu", "sigmoid"),
                (np.float32, 1e-3, 333, 5, 16, 3, 1, "softplus", "none"),
                (np.float32, 1e-3, 77, 128, 128, 2, 128, "leaky_relu", "relu"),
                (np.float16, 1.0, 1001, 31, 64, 2, 3, "relu", "none"),
                (np.float32, 1e-3, 65536, 32, 64, 2, 16, "relu", "trunc_exp")]:
            ws, bs = _mlp(rng, in_dim, width, hidden, out_dim, dtype)
            x = rng.uniform(-1, 1, (n, in_dim)).astype(dtype)
            layers = hidden + 1
            out.append(_case("fused_mlp", f"n={n} {in_dim}-{width}x{hidden}-{out_dim} {act}/{out_act}", dtype,
                             [x] + ws + bs,
                             lambda a, *wb, k=layers, f=act, g=out_act: metal_ops.fused_mlp(
                                 a, list(wb[:k]), list(wb[k:]), activation=f, output_activation=g), tol,
                             {"activation": act, "output_activation": out_act},
                             check=fused_mlp_float16_check if dtype == np.float16 else None))

    from metal_ops import _loader

    if cpu_only:  # no float16; RayMarchStatic outside XLA too
        out, xla_only = [c for c in out if c.dtype != "float16"] + xla_only, []
    with_xla = xla_ops()
    out += [under_xla(c) for c in out + xla_only
            if c.op in with_xla and c.dtype != "int32" and _loader.has_xla_kernels(with_xla[c.op])
            and not (c.op == "fused_conv2d" and c.inputs[1].shape[2] == 0)]
    return out


# The gradient op of a forward op whose gradient is not <op>Grad: FusedConv2D's
# are TensorFlow's convolution gradients and FusedActivationGrad.
_GRADIENT_OPS = {"MetalOpsFusedConv2D": "MetalOpsFusedActivationGrad"}


@functools.lru_cache(maxsize=None)
def xla_ops():
    """The ops with XLA kernels in this process (docs/XLA.md), by self-test op:
    {op: (its TensorFlow op, its gradient op where that has XLA kernels too)}.
    Each of their cases runs again inside tf.function(jit_compile=True),
    forward and gradients, against the same CPU reference. int32 ZeroOut is
    left out: TensorFlow keeps int32 on the host. So is FusedConv2D with a
    filter of depth 0: eager runs it, but in a graph (tf.function) the op's
    shape function refuses it, as Conv2D's does.

    Read from TensorFlow's kernel registry: the library's ops (its generated
    wrappers, MetalOps<Name> beside metal_ops_<name>) with an XLA_CPU_JIT
    kernel, which XLA lists there from its first compilation in the process
    on. Empty where the library registered none (metal_ops._loader.xla_status:
    the macOS build, a registration refused or too late); where TensorFlow
    lists a GPU, metal_ops._loader.has_xla_kernels says which have CUDA
    handlers."""
    from metal_ops import _loader

    library = _loader.load_library()
    if not _loader.xla_status()[0]:
        return {}
    import tensorflow as tf
    from tensorflow.python.framework import kernels

    tf.function(lambda: tf.zeros([]), jit_compile=True)()  # XLA lists its kernels from its first compilation on
    snake = {}  # TensorFlow op -> the self-test's name of it: MetalOpsSHEncode -> sh_encode
    for name in dir(library):
        if not name.startswith("_") and name.islower():
            for op in (n for n in dir(library) if n.lower() == name.replace("_", "") and n != name):
                snake[op] = name.removeprefix("metal_ops_")
    with_xla = {op for op in snake
                if any(k.device_type == "XLA_CPU_JIT" for k in kernels.get_registered_kernels_for_op(op).kernel)}
    out = {}
    for op in sorted(with_xla):
        gradient = _GRADIENT_OPS.get(op, op + "Grad")
        if not op.endswith("Grad"):
            out[snake[op]] = (op, gradient) if gradient in with_xla else (op,)
    return out


XLA_LABEL = " [xla]"  # the end of an [xla] case's label


def under_xla(case):
    import tensorflow as tf

    return case._replace(label=case.label + XLA_LABEL, call=tf.function(case.call, jit_compile=True))


def _plain_label(case):
    """The label of the case an [xla] case repeats (its own for any other)."""
    return case.label.removesuffix(XLA_LABEL)


def fused_mlp_float16_check(case, values, grads):
    """(error, note) of a float16 FusedMLP case: the largest |device - reference|
    / bound against the float64 model and the bound of
    metal_ops._reference.fused_mlp (tolerance 1)."""
    from metal_ops._reference import fused_mlp as reference

    layers = (len(case.inputs) - 1) // 2
    x, ws, bs = case.inputs[0], case.inputs[1:1 + layers], case.inputs[1 + layers:]
    names = ["output 0"] + [f"gradient of input {i}" for i in range(1 + 2 * layers)]
    if len(values) != 1 or len(grads) != 1 + 2 * layers:
        return math.inf, f"{len(values)} outputs and {len(grads)} gradients on the device"
    if any(g is None for g in grads):
        return math.inf, f"{names[1 + [g is None for g in grads].index(True)]}: missing on the device"
    # The loss casts y to float32: its gradient reaches the op as the cotangent rounded to float16.
    dy = cotangents(case, [np.shape(values[0])])[0].astype(np.float16)
    bound = reference.float16_bound(x, ws, bs, dy, case.attrs["activation"], case.attrs["output_activation"])
    ratios = bound.ratios(y=values[0], dx=grads[0], dws=grads[1:1 + layers], dbs=grads[1 + layers:])
    worst = max(range(len(ratios)), key=lambda i: ratios[i][1])
    return ratios[worst][1], f"largest in {names[worst]} (error / float16 bound)"


# ---- running and comparing -------------------------------------------------------------------

def cotangents(case, shapes):
    """Fixed random cotangents for outputs of these shapes (the same on every
    device, and for a case and its [xla] case)."""
    rng = np.random.default_rng(zlib.crc32(f"{case.op} {_plain_label(case)} {case.dtype}".encode()))
    return [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]


def execute(case, device, repeat=1):
    """Runs the case on `device`: (outputs, gradients, devices the outputs were placed on, seconds).

    Seconds: the fastest of `repeat` runs after one warm-up run, each a forward
    and backward pass with every result copied back to NumPy.
    """
    import tensorflow as tf

    def once():
        with tf.device(device):
            tensors = [tf.constant(a) for a in case.inputs]
            with tf.GradientTape() as tape:
                if case.differentiable:
                    tape.watch(tensors)
                outputs = [o for o in tf.nest.flatten(case.call(*tensors)) if o is not None]
                if case.differentiable:
                    cots = cotangents(case, [o.shape for o in outputs])
                    loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32) * c) for o, c in zip(outputs, cots)])
            grads = tape.gradient(loss, tensors) if case.differentiable else []
        values = [o.numpy() for o in outputs]
        grad_values = [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads]
        return values, grad_values, [o.device for o in outputs]

    once()
    best = math.inf
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        values, grad_values, placed = once()
        best = min(best, time.perf_counter() - start)
    return values, grad_values, placed, best


# A case's reference results, kept until its [xla] case (the same inputs and
# cotangents) takes them, by (id of its inputs, op, label, dtype).
_REFERENCE_RESULTS = {}


def numpy_reference(case, repeat=1):
    """(outputs, gradients of sum(cotangent * output), None) of a case from its
    op's independent NumPy reference (metal_ops._reference)."""
    from metal_ops import _reference

    key = (id(case.inputs), case.op, _plain_label(case), case.dtype)
    if key in _REFERENCE_RESULTS:
        outs, grads = _REFERENCE_RESULTS.pop(key)[1]
    else:
        outs, grads = _reference.references()[case.op](case.inputs, case.attrs)
        cots = cotangents(case, [np.shape(o) for o in outs])
        grads = grads(cots) if case.differentiable else []
        if case.op in xla_ops() and not case.label.endswith(XLA_LABEL):
            _REFERENCE_RESULTS[key] = (case.inputs, (outs, grads))  # the inputs held: their id stays theirs
    return list(outs), list(grads), None


def cpu_reference(case, repeat=1):
    """The same op on the CPU: (outputs, gradients, seconds)."""
    values, grads, _, seconds = execute(case, "/CPU:0", repeat=repeat)
    return values, grads, seconds


def max_error(got, want, names=None):
    """Largest |got - want| / max(1, |want|) over the arrays (inf on a mismatch),
    and which array (`names`, else its index) it was found in."""
    worst, note = 0.0, ""
    for k, (a, b) in enumerate(zip(got, want)):
        k = names[k] if names else f"result {k}"
        if a is None or b is None:
            if (a is None) != (b is None):
                return math.inf, f"{k}: {'missing' if a is None else 'unexpected'} on the device"
            continue
        a = np.asarray(a)
        b = np.asarray(b)
        if a.shape != b.shape:
            return math.inf, f"{k}: shape {a.shape} on the device, {b.shape} expected"
        if a.size == 0:
            continue
        a = a.astype(np.float64)
        b = b.astype(np.float64)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if np.any(nan_a != nan_b):
            return math.inf, f"{k}: NaN at {int(np.sum(nan_a != nan_b))} positions on one side only"
        both = ~nan_a
        with np.errstate(invalid="ignore"):
            diff = np.where(a[both] == b[both], 0.0, np.abs(a[both] - b[both]))
        err = float(np.max(diff / np.maximum(1.0, np.abs(b[both])), initial=0.0))
        if not err <= worst:
            worst, note = err, f"largest in {k}"
    if len(got) != len(want):
        return math.inf, f"{len(got)} results on the device, {len(want)} expected"
    return worst, note


# RayMarch: where a ray's samples fall is decided at cell boundaries (a step is
# kept when its midpoint lies in an occupied cell), so one ulp of rounding (the
# GPU compiler contracting a * b + c into one fma where the CPU's does not) can
# move a midpoint across a boundary and change that ray's samples: one sample
# more or fewer, or the rest of an occupied run shifted by half a step; a ray
# grazing a cell face can meet that twice. The comparison checks what such a
# flip cannot change: each side's packing (offsets the prefix sum of the
# counts, each sample's ray index, sorted disjoint intervals); the samples of
# every other ray, to the case's tolerance (a ray none of whose samples moved
# by a quarter of its own length is such a ray: a flip moves them by half a
# step); and for the flipped rays, that they are few, that their counts are
# within RAY_MARCH_MAX_COUNT_CHANGE and that the length of ray sampled on one
# side only is at most RAY_MARCH_MAX_LENGTH_CHANGE of their steps.
RAY_MARCH_MAX_FLIPPED = 0.01        # fraction of the rays (at least one ray)
RAY_MARCH_MAX_COUNT_CHANGE = 2      # samples, per ray
RAY_MARCH_MAX_LENGTH_CHANGE = 3.0   # in units of the ray's longest step


def _ray_march_packing(result, side):
    """Why a RayMarch result (t_starts, t_ends, ray_indices, ray_offsets,
    ray_counts) is not a valid packing, or None."""
    t0, t1, idx, off, cnt = (np.asarray(a) for a in result)
    n, r = t0.shape[0] if t0.ndim == 1 else -1, cnt.shape[0] if cnt.ndim == 1 else -1
    if n < 0 or r < 0 or t1.shape != (n,) or idx.shape != (n,) or off.shape != (r,):
        return f"{side}: shapes {[np.shape(a) for a in result]}, not [N] x 3 and [R] x 2"
    cnt = cnt.astype(np.int64)
    if np.any(cnt < 0) or int(cnt.sum()) != n:
        return f"{side}: ray_counts sum to {int(cnt.sum())} (or are negative) for {n} samples"
    if not np.array_equal(off.astype(np.int64), np.cumsum(cnt) - cnt):
        return f"{side}: ray_offsets are not the prefix sum of ray_counts"
    if not np.array_equal(idx.astype(np.int64), np.repeat(np.arange(r), cnt)):
        return f"{side}: ray_indices do not name each sample's ray"
    with np.errstate(invalid="ignore"):
        if not np.all(t0 < t1):
            return f"{side}: a sample with t_start >= t_end (or NaN)"
        same_ray = idx[1:] == idx[:-1]
        if np.any(t1[:-1][same_ray] > t0[1:][same_ray]):
            return f"{side}: a ray's samples are not sorted and disjoint"
    return None


def _sampled_length_change(a0, a1, b0, b1):
    """The length of ray inside one set of sorted disjoint intervals and not the
    other: |A| + |B| - 2 |A n B|."""
    both, i, j = 0.0, 0, 0
    while i < len(a0) and j < len(b0):
        both += max(0.0, min(a1[i], b1[j]) - max(a0[i], b0[j]))
        if a1[i] < b1[j]:
            i += 1
        else:
            j += 1
    return float(np.sum(a1 - a0) + np.sum(b1 - b0) - 2.0 * both)


def compare_ray_march(got, want, names=None, tolerance=0.0):
    """(error, note) for RayMarch's five outputs (robust to one-ulp flips at
    cell boundaries; see above): the largest |device - cpu| / max(1, |cpu|) of
    t_starts and t_ends over the rays that did not flip; inf when a packing is
    invalid or the flipped rays break a limit."""
    if len(got) != 5 or len(want) != 5 or any(a is None for a in list(got) + list(want)):
        return math.inf, f"{len(got)} results on the device, {len(want)} expected (RayMarch has 5)"
    for result, side in ((got, "device"), (want, "expected")):
        problem = _ray_march_packing(result, side)
        if problem:
            return math.inf, problem
    g0, g1, _, g_off, g_cnt = (np.asarray(a) for a in got)
    w0, w1, w_idx, w_off, w_cnt = (np.asarray(a) for a in want)
    rays = len(w_cnt)
    if len(g_cnt) != rays:
        return math.inf, f"{len(g_cnt)} rays on the device, {rays} expected"
    g_cnt, w_cnt = g_cnt.astype(np.int64), w_cnt.astype(np.int64)
    g_off, w_off = g_off.astype(np.int64), w_off.astype(np.int64)
    # Rays with equal counts, sample k against sample k: the relative error and
    # how far each sample moved against its own length.
    ray = w_idx.astype(np.int64)
    aligned = g_cnt[ray] == w_cnt[ray]
    at = g_off[ray[aligned]] + (np.arange(len(w0))[aligned] - w_off[ray[aligned]])
    length = w1[aligned].astype(np.float64) - w0[aligned]
    ray_error, moved = np.zeros(rays), np.zeros(rays)
    for g, w in ((g0, w0), (g1, w1)):
        wa = w[aligned].astype(np.float64)
        diff = np.abs(g[at].astype(np.float64) - wa)
        np.maximum.at(moved, ray[aligned], diff / length)
        np.maximum.at(ray_error, ray[aligned], diff / np.maximum(1.0, np.abs(wa)))
    flipped = (g_cnt != w_cnt) | ~(moved < 0.25)
    limit = max(1, math.ceil(RAY_MARCH_MAX_FLIPPED * rays))
    if int(flipped.sum()) > limit:
        return math.inf, (f"{int(flipped.sum())} of {rays} rays sampled differently (at most {limit} may: "
                          f"one-ulp flips at cell boundaries)")
    for r in np.flatnonzero(flipped):
        if abs(int(g_cnt[r] - w_cnt[r])) > RAY_MARCH_MAX_COUNT_CHANGE:
            return math.inf, f"ray {r}: {g_cnt[r]} samples on the device, {w_cnt[r]} expected"
        gs, ws = slice(g_off[r], g_off[r] + g_cnt[r]), slice(w_off[r], w_off[r] + w_cnt[r])
        a0, a1 = g0[gs].astype(np.float64), g1[gs].astype(np.float64)
        b0, b1 = w0[ws].astype(np.float64), w1[ws].astype(np.float64)
        step = max(np.max(a1 - a0, initial=0.0), np.max(b1 - b0, initial=0.0))
        change = _sampled_length_change(a0, a1, b0, b1)
        if not change <= RAY_MARCH_MAX_LENGTH_CHANGE * step:
            return math.inf, (f"ray {r}: a length of {change:.3g} sampled on one side only, more than "
                              f"{RAY_MARCH_MAX_LENGTH_CHANGE:g} steps of {step:.3g}")
    error = float(np.max(ray_error[~flipped], initial=0.0))
    note = f"{int(flipped.sum())} rays flipped at cell boundaries" if flipped.any() else ""
    return error, note


def _ray_march_static_problem(result, side, budget):
    """Why a RayMarchStatic result (the five outputs of RayMarch, num_samples,
    num_rays) is not a valid static packing, or None."""
    t0, t1, idx, off, cnt, n, k = (np.asarray(a) for a in result)
    rays = cnt.shape[0] if cnt.ndim == 1 else -1
    if t0.shape != (budget,) or t1.shape != (budget,) or idx.shape != (budget,) or off.shape != (rays,) \
            or n.shape != () or k.shape != ():
        return f"{side}: shapes {[np.shape(a) for a in result]}, not [{budget}] x 3, [R] x 2 and two scalars"
    n, k = int(n), int(k)
    if not (0 <= n <= budget and 0 <= k <= rays):
        return f"{side}: num_samples {n}, num_rays {k} out of range"
    if np.any(cnt[k:] != 0) or np.any(off[k:] != n) or int(cnt[:k].astype(np.int64).sum()) != n:
        return f"{side}: rays from num_rays on are not empty at num_samples, or the kept counts do not sum to it"
    pad = max(rays - 1, 0)
    if np.any(t0[n:] != 0) or np.any(t1[n:] != 0) or np.any(idx[n:] != pad):
        return f"{side}: the samples from num_samples on are not [0, 0] intervals of ray {pad}"
    return None


def compare_ray_march_static(got, want, names=None, tolerance=0.0):
    """(error, note) for RayMarchStatic's seven outputs: each side's padding
    and layout exactly, and the rays both sides kept by compare_ray_march (a
    flip at a cell boundary can also move the cut by a ray)."""
    if len(got) != 7 or len(want) != 7 or any(a is None for a in list(got) + list(want)):
        return math.inf, f"{len(got)} results on the device, {len(want)} expected (RayMarchStatic has 7)"
    budget = np.shape(want[0])[0] if np.ndim(want[0]) == 1 else -1
    for result, side in ((got, "device"), (want, "expected")):
        problem = _ray_march_static_problem(result, side, budget)
        if problem:
            return math.inf, problem
    k_got, k_want = int(got[6]), int(want[6])
    rays = len(want[4])
    if abs(k_got - k_want) > max(1, math.ceil(RAY_MARCH_MAX_FLIPPED * rays)):
        return math.inf, f"{k_got} rays kept on the device, {k_want} expected"
    kept = min(k_got, k_want)

    def head(result):  # the packing of the first `kept` rays
        t0, t1, idx, off, cnt = (np.asarray(a) for a in result[:5])
        end = int(off[kept]) if kept < int(result[6]) else int(result[5])
        return [t0[:end], t1[:end], idx[:end], off[:kept], cnt[:kept]]

    error, note = compare_ray_march(head(got), head(want), tolerance=tolerance)
    if k_got != k_want:
        note = (note + "; " if note else "") + f"{k_got} rays kept on the device, {k_want} expected"
    return error, note


# Comparisons of their own, by op (the others: max_error).
COMPARISONS = {"ray_march": compare_ray_march, "ray_march_static": compare_ray_march_static}


def error_note(e):
    """A failed case's note: the error's first line and, where tf.function
    wrapped it ("in user code:" and a traceback), its last, which says what
    went wrong."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    text = " ... ".join(lines[:1] + lines[-1:]) if len(lines) > 1 else "".join(lines)
    return f"{type(e).__name__}: {text}"[:400]


def run_case(case, device, reference, repeat):
    row = {"op": case.op, "case": case.label, "dtype": case.dtype, "device": device, "gradients": case.differentiable,
           "tolerance": case.tolerance, "error": None, "passed": False, "note": "",
           "device_ms": None, "reference_ms": None}
    try:
        values, grads, placed, seconds = execute(case, device, repeat=repeat)
        row["device_ms"] = seconds * 1e3
        if case.check is not None:
            error, note = case.check(case, values, grads)
        else:
            want_values, want_grads, ref_seconds = reference(case, repeat)
            row["reference_ms"] = None if ref_seconds is None else ref_seconds * 1e3
            names = [f"output {i}" for i in range(len(values))] + [f"gradient of input {i}" for i in range(len(grads))]
            compare = COMPARISONS.get(case.op)
            got, want = values + grads, list(want_values) + list(want_grads)
            error, note = compare(got, want, names, case.tolerance) if compare else max_error(got, want, names)
        row["error"], row["note"] = error, note
        import tensorflow as tf

        kind = expected_device_type(case, tf.DeviceSpec.from_string(device).device_type)
        wrong_place = [p for p in placed if tf.DeviceSpec.from_string(p).device_type != kind]
        if wrong_place:
            row["note"] = f"ran on {wrong_place[0]}, not {device}"
        elif kind != tf.DeviceSpec.from_string(device).device_type:
            row["note"] = HOST_INT32_NOTE
        row["passed"] = error <= case.tolerance and not wrong_place
    except Exception as e:  # a TF error (a GPU fault in sync mode) fails the case, not the run
        row["note"] = error_note(e)
    return row


HOST_INT32_NOTE = "int32 runs on the host CPU: TensorFlow keeps int32 tensors in host memory on a CUDA GPU"


def expected_device_type(case, device_type, platform=None):
    """Where a case's op must run when asked for `device_type`: int32 on a
    CUDA GPU stays on the host CPU, as TensorFlow's own int32 ops do (a Metal
    kernel registered for int32 keeps it on the Metal GPU)."""
    platform = sys.platform if platform is None else platform
    if device_type == "GPU" and case.dtype == "int32" and platform != "darwin":
        return "CPU"
    return device_type


def gpu_devices():
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices("GPU")]


def run(devices=None, reference=None, ops=None, repeat=3, selected=None, progress=None):
    """[row] for every case on every device (GPUs TensorFlow lists by default),
    compared with `reference` (the CPU op by default)."""
    os.environ.setdefault(SYNC_ENV, "1")
    import tensorflow as tf

    from metal_ops import load_library

    # The gradients of some cases go through TensorFlow's own GPU ops (the
    # convolution's backprops), which use TF32 by default on NVIDIA GPUs: full
    # float32 here, so the comparison measures this library's kernels.
    tf.config.experimental.enable_tensor_float_32_execution(False)
    load_library()
    devices = gpu_devices() if devices is None else devices
    reference = reference or cpu_reference
    rows = []
    for case in selected if selected is not None else cases(ops):
        for device in devices:
            rows.append(run_case(case, device, reference, repeat))
            if progress:
                progress(rows[-1])
    return rows


# ---- report --------------------------------------------------------------------------------

def _fmt(value, spec):
    return "-" if value is None else ("inf" if value == math.inf else format(value, spec))


def _differentiable(row):
    return row.get("gradients", True)


def format_table(rows):
    header = ["op", "case", "dtype", "device", "max error", "tolerance", "result", "device ms", "cpu ms", "note"]
    body = [[r["op"], r["case"] + ("" if _differentiable(r) else " (forward)"), r["dtype"],
             r["device"].replace("/device:", ""), _fmt(r["error"], ".2e"), _fmt(r["tolerance"], ".0e"),
             "pass" if r["passed"] else "FAIL", _fmt(r["device_ms"], ".2f"), _fmt(r["reference_ms"], ".2f"),
             "" if r["passed"] else r["note"]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = []
    for line in [header] + body:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    return "\n".join(lines)


def environment():
    import tensorflow as tf

    from metal_ops import build_info

    try:
        from importlib import metadata

        metal = metadata.version("tensorflow-metal")
    except Exception:
        metal = None
    devices = []
    for d in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(d)
        except Exception:
            details = {}
        devices.append({"name": d.name, "details": {k: str(v) for k, v in details.items()}})
    return {
        "tensorflow": tf.__version__,
        "tensorflow_metal": metal,
        "os": platform.platform(),
        "mac_ver": platform.mac_ver()[0] or None,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "gpu_devices": devices,
        "metal_ops_build": build_info(),
        "env": {k: os.environ.get(k) for k in (SYNC_ENV, "MTL_SHADER_VALIDATION", "MTL_DEBUG_LAYER",
                                               "MPS_MAX_COMMIT_COUNT") if k in os.environ},
    }


def main(argv=None, devices=None, reference=None, selected=None):
    """The command line. `devices`, `reference` and `selected` (cases) replace
    the GPUs, the CPU reference and the case list (for this package's tests)."""
    parser = argparse.ArgumentParser(prog="python -m metal_ops.selftest", description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="write the report (table and environment) to FILE")
    parser.add_argument("--ops", help="comma-separated op names (default: every op)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case and device (default 3)")
    args = parser.parse_args(argv)
    os.environ.setdefault(SYNC_ENV, "1")
    import tensorflow as tf  # noqa: F401  (after the environment variable)

    env = environment()
    devices = gpu_devices() if devices is None else devices
    ops = set(args.ops.split(",")) if args.ops else None
    print(f"metal_ops.selftest: TensorFlow {env['tensorflow']}, tensorflow-metal {env['tensorflow_metal'] or '-'}, "
          f"{env['os']}, backends {env['metal_ops_build'].get('backends')}, {SYNC_ENV}={os.environ.get(SYNC_ENV)}")
    if not devices:
        print("metal_ops.selftest: no GPU device: TensorFlow lists none on this machine (on a Mac: pip install "
              "tensorflow-metal, see README). The CPU kernels against the independent float64 NumPy references "
              "the package ships (metal_ops._reference).")
        devices, reference = ["/CPU:0"], reference or numpy_reference
        if selected is None:
            selected = cases(ops, cpu_only=True)
    print(f"metal_ops.selftest: devices {', '.join(devices)}")
    rows = run(devices, reference, ops, args.repeat, selected)
    print(format_table(rows))
    failed = [r for r in rows if not r["passed"]]
    passed = not failed
    summary = (f"metal_ops.selftest: {len(rows) - len(failed)} of {len(rows)} cases passed"
               if rows else "metal_ops.selftest: no cases run")
    print(summary + ("" if passed else f"; {len(failed)} FAILED"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"passed": passed, "environment": env, "devices": devices,
                       "results": [{k: (None if v == math.inf else v) if k == "error" else v for k, v in r.items()}
                                   | {"error_is_inf": r["error"] == math.inf} for r in rows]},
                      f, indent=2, default=str)
        print(f"metal_ops.selftest: report written to {args.json}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
