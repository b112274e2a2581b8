"""The ops and their gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on the CPU: values and gradients against NumPy references
(tests/reference/) and against the same ops without XLA, shapes (empty ones
too) and dtypes, attributes passed to the handler, bad inputs refused while
XLA compiles with the TensorFlow kernels' messages, and the rule that the
library must load before TensorFlow's first op. Each test runs on every
device (tests/devices.py): on the CPU through the host handlers, on a CUDA
GPU through the CUDA handlers, where every op it compiles has one
(`metal_ops._loader.xla_cuda_ops()`; skipped otherwise, naming the op). Values
a kernel checks at run time are checked on the CPU alone (cpu_semantics)."""
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import _loader, selftest
from tests.reference import distortion_loss as distortion_ref
from tests.reference import fused_conv2d as conv_ref
from tests.reference import hash_encode as hash_ref
from tests.reference import packed_volume_render as pvr_ref
from tests.reference import robust_loss as robust_ref
from tests.reference import sh_encode as sh_ref
from tests.reference import trunc_exp as trunc_ref
from tests.reference import volume_render as vr_ref
from tests.reference import zero_out as zero_ref

pytestmark = [
    pytest.mark.every_device,
    pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA: the macOS build has no XLA kernels"),
]

# The XLA kernels each test compiles, by the op its name starts with
# (test_<op>_...): selftest.xla_ops().


def ops_of(test_name):
    xla_ops = selftest.xla_ops()
    op = max((k for k in xla_ops if f"{test_name}_".startswith(f"test_{k}_")), key=len, default=None)
    if op is None:
        return ()
    return xla_ops[op] + (("MetalOpsHashEncodeGradGrad",) if "second_derivatives" in test_name else ())


_ON_GPU = [False]


@pytest.fixture(autouse=True)
def cuda_handlers_on_a_gpu(request, tf_device):
    """On a GPU, a test runs where every op it compiles has a CUDA handler."""
    _ON_GPU[0] = bool(tf_device) and "GPU" in tf_device
    if _ON_GPU[0]:
        missing = [op for op in ops_of(request.node.originalname) if op not in _loader.xla_cuda_ops()]
        if missing:
            pytest.skip(f"no CUDA handler for {', '.join(missing)} (docs/XLA.md)")


def both(fn, *args):
    """fn(*args) under XLA and without it, as NumPy values (nested like fn's result)."""
    xla = tf.function(fn, jit_compile=True)(*args)
    plain = tf.function(fn, jit_compile=False)(*args)
    return tf.nest.map_structure(np.asarray, xla), tf.nest.map_structure(np.asarray, plain)


def assert_same(xla, plain, rtol=0.0, atol=0.0):
    """XLA's results against the op's without XLA: the same kernels, so the
    same bits on the CPU. On a GPU, sums the CUDA kernels form with atomics
    (table and parameter gradients) differ in order from run to run."""
    if _ON_GPU[0]:
        half = any(a.dtype.itemsize < 4 for a in tf.nest.flatten(xla))
        rtol, atol = max(rtol, 1e-2 if half else 1e-5), max(atol, 1e-2 if half else 1e-5)
    for a, b in zip(tf.nest.flatten(xla), tf.nest.flatten(plain)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


def with_grad(op, *watched, output_grad):
    """op(*watched) and the gradients of sum(op * output_grad) for every watched input."""
    def fn(*xs):
        with tf.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            y = op(*xs)
        return y, tape.gradient(y, list(xs), output_gradients=output_grad)
    return fn


def compile_error(fn, *args):
    """The error of compiling fn(*args) with XLA, traced with unknown sizes (so
    that the shape functions pass and the XLA kernel's checks, on the static
    shapes, refuse the input)."""
    signature = [tf.TensorSpec([None] * a.shape.rank, a.dtype) for a in args]
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        tf.function(fn, jit_compile=True, input_signature=signature)(*args)
    return str(info.value)


# ---- ZeroOut ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("shape,index", [((5,), 4), ((3, 4), 7), ((0,), 0)])
def test_zero_out(dtype, shape, index):
    x = tf.constant(np.arange(1, 1 + np.prod(shape)).reshape(shape).astype(dtype))
    xla, plain = both(lambda t: metal_ops.zero_out(t, preserve_index=index), x)
    np.testing.assert_array_equal(xla, zero_ref.zero_out(x.numpy(), index))
    assert_same(xla, plain)


def test_zero_out_index_out_of_range_is_a_compile_error():
    message = compile_error(lambda t: metal_ops.zero_out(t, preserve_index=6), tf.zeros([2, 3]))
    assert "preserve_index 6 is out of range for input 'to_zero' with 6 elements" in message


# ---- TruncExp ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1000,), (33, 17), (), (4, 0)])
def test_trunc_exp_and_gradient(dtype, shape):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-10, 10, shape).astype(dtype))
    dy = tf.constant(rng.uniform(-2, 2, shape).astype(dtype))
    xla, plain = both(with_grad(metal_ops.trunc_exp, x, output_grad=dy), x)
    trunc_ref.assert_like(xla[0], trunc_ref.forward(x.numpy()), dtype)
    trunc_ref.assert_like(xla[1][0], trunc_ref.grad(dy.numpy(), x.numpy()), dtype)
    assert_same(xla, plain)


def test_trunc_exp_grad_shape_mismatch_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda dy, x: lib.metal_ops_trunc_exp_grad(dy, x), tf.zeros([3]), tf.zeros([4]))
    assert "TruncExpGrad: 'dy' has shape [3] but 'x' has shape [4]" in message


# ---- FusedMLP ---------------------------------------------------------------------------

def mlp_params(rng, widths):
    kernels = [tf.constant(rng.normal(0, 0.5, (a, b)).astype(np.float32)) for a, b in zip(widths, widths[1:])]
    biases = [tf.constant(rng.normal(0, 0.1, (b,)).astype(np.float32)) for b in widths[1:]]
    return kernels, biases


@pytest.mark.parametrize("rows", [37, 0])
@pytest.mark.parametrize("widths,activation,output_activation", [
    ((8, 16, 4), "relu", None),
    ((5, 32, 32, 3), "leaky_relu", "sigmoid"),
    ((3, 16, 16, 16, 1), "softplus", "trunc_exp"),
])
def test_fused_mlp_and_gradient(rows, widths, activation, output_activation):
    rng = np.random.default_rng(rows)
    x = tf.constant(rng.normal(size=(rows, widths[0])).astype(np.float32))
    kernels, biases = mlp_params(rng, widths)
    g = tf.constant(rng.normal(size=(rows, widths[-1])).astype(np.float32))

    def op(x, *params):
        n = len(params) // 2
        return metal_ops.fused_mlp(x, list(params[:n]), list(params[n:]), activation=activation,
                                   output_activation=output_activation, leaky_relu_alpha=0.1)

    xla, plain = both(with_grad(op, x, *kernels, *biases, output_grad=g), x, *kernels, *biases)
    assert_same(xla, plain, rtol=1e-5, atol=1e-5)


def test_fused_mlp_bad_kernel_shape_is_a_compile_error():
    rng = np.random.default_rng(0)
    kernels, biases = mlp_params(rng, (8, 16, 4))
    kernels[1] = tf.zeros([15, 4])
    message = compile_error(lambda x: metal_ops.fused_mlp(x, kernels, biases), tf.zeros([4, 8]))
    assert "FusedMLP" in message


# ---- HashEncode -------------------------------------------------------------------------

GRID = dict(num_levels=4, log2_hashmap_size=10, base_resolution=4, per_level_scale=1.6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("dims,features", [(3, 2), (1, 1), (4, 8)])
@pytest.mark.parametrize("n", [300, 0])
@pytest.mark.parametrize("modes", [("linear", "clamp"), ("smoothstep", "wrap")])
def test_hash_encode_and_gradients(dtype, dims, features, n, modes):
    rng = np.random.default_rng(n + dims)
    rows = metal_ops.hash_grid_size(dims, **GRID)
    x = tf.constant(rng.uniform(-0.05, 1.05, (n, dims)).astype(np.float32))
    table = tf.constant(rng.uniform(-1, 1, (rows, features)).astype(dtype))
    g = tf.constant(rng.normal(size=(n, GRID["num_levels"] * features)).astype(dtype))
    kw = dict(GRID, interpolation=modes[0], out_of_range=modes[1])
    op = lambda x, t: metal_ops.hash_encode(x, t, **kw)  # noqa: E731
    xla, plain = both(with_grad(op, x, table, output_grad=g), x, table)
    tol = 1e-5 if dtype == np.float32 else 2e-2
    want = hash_ref.encode(x.numpy(), table.numpy(), **kw)
    np.testing.assert_allclose(xla[0].astype(np.float64), want, rtol=tol, atol=tol)
    d_table, _ = hash_ref.encode_grads(x.numpy(), table.numpy(), g.numpy(), **kw)
    np.testing.assert_allclose(xla[1][1].astype(np.float64), d_table, rtol=10 * tol, atol=10 * tol)
    # The table gradient is summed in a fixed order: the same bits with XLA as without.
    assert_same(xla, plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", [200, 0])
def test_hash_encode_second_derivatives(dtype, n):
    """The input gradient's gradients (MetalOpsHashEncodeGradGrad: the
    table's and grad_encoded's) under XLA, as without it, to the bit."""
    rng = np.random.default_rng(n)
    rows = metal_ops.hash_grid_size(3, **GRID)
    x = tf.constant(rng.uniform(0, 1, (n, 3)).astype(np.float32))
    table = tf.constant(rng.uniform(-1, 1, (rows, 2)).astype(dtype))
    w = tf.constant(rng.normal(size=(n, GRID["num_levels"] * 2)).astype(dtype))
    v = tf.constant(rng.normal(size=(n, 3)).astype(np.float32))

    def fn(x, table, w):
        with tf.GradientTape() as outer:
            outer.watch([table, w])
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = metal_ops.hash_encode(x, table, **GRID)
                s = tf.reduce_sum(tf.cast(y * w, tf.float32))
            dx = inner.gradient(s, x)
            loss = tf.reduce_sum(dx * v)
        return dx, outer.gradient(loss, [table, w])

    xla, plain = both(fn, x, table, w)
    assert_same(xla, plain)
    assert np.isfinite(xla[1][0].astype(np.float32)).all() and (n == 0 or np.abs(xla[1][0]).max() > 0)


def test_hash_encode_grad_grad_bad_shape_is_a_compile_error():
    lib = metal_ops.load_library()
    rows = metal_ops.hash_grid_size(3, **GRID)
    message = compile_error(lambda gg, g, x, t: lib.metal_ops_hash_encode_grad_grad(gg, g, x, t, **GRID),
                            tf.zeros([5, 2]), tf.zeros([5, 8]), tf.zeros([5, 3]), tf.zeros([rows, 2]))
    assert "grad_grad_inputs" in message


def test_hash_encode_table_of_the_wrong_size_is_a_compile_error():
    table = tf.zeros([metal_ops.hash_grid_size(3, **GRID) + 1, 2])
    message = compile_error(lambda x, t: metal_ops.hash_encode(x, t, **GRID), tf.zeros([5, 3]), table)
    assert "table" in message


# ---- SHEncode ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(257, 3), (4, 5, 3), (0, 3)])
@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_sh_encode_and_gradient(dtype, shape, degree):
    rng = np.random.default_rng(degree)
    d = rng.normal(size=shape)
    dirs = tf.constant((d / np.maximum(np.linalg.norm(d, axis=-1, keepdims=True), 1e-9)).astype(dtype))
    g = tf.constant(rng.normal(size=shape[:-1] + (degree * degree,)).astype(dtype))
    xla, plain = both(with_grad(lambda x: metal_ops.sh_encode(x, degree=degree), dirs, output_grad=g), dirs)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(xla[0].astype(np.float64), sh_ref.values(dirs.numpy(), degree), rtol=tol, atol=tol)
    np.testing.assert_allclose(xla[1][0].astype(np.float64), sh_ref.vjp(dirs.numpy(), g.numpy(), degree),
                               rtol=10 * tol, atol=10 * tol)
    assert_same(xla, plain)


def test_sh_encode_bad_dirs_shape_is_a_compile_error():
    message = compile_error(lambda x: metal_ops.sh_encode(x, degree=2), tf.zeros([4, 2]))
    assert "SHEncode: 'dirs' must be [..., 3] (x, y, z along the last axis), got shape [4,2]" in message


def test_sh_encode_grad_shape_mismatch_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda g, x: lib.metal_ops_sh_encode_grad(g, x, degree=2), tf.zeros([4, 9]),
                            tf.zeros([4, 3]))
    assert "SHEncodeGrad: 'grad' must have the values' shape [4,4] for 'dirs' [4,3] and degree 2, got [4,9]" in message


# ---- RobustLoss -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, tf.bfloat16.as_numpy_dtype])
@pytest.mark.parametrize("shape", [(300,), (17, 6), (0, 6)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_robust_loss_and_gradients(dtype, shape, per_channel):
    rng = np.random.default_rng(len(shape))
    x = tf.constant(rng.normal(0, 2, shape).astype(dtype))
    channels = shape[-1] if per_channel else None
    alpha = tf.constant(rng.uniform(-3, 3, channels).astype(np.float32) if per_channel else np.float32(0.7))
    scale = tf.constant(rng.uniform(0.5, 2, channels).astype(np.float32) if per_channel else np.float32(1.3))
    g = tf.constant(rng.normal(size=shape).astype(dtype))
    xla, plain = both(with_grad(metal_ops.robust_loss, x, alpha, scale, output_grad=g), x, alpha, scale)
    tol = {np.float32: 1e-5}.get(dtype, 2e-2)
    xs = x.numpy().astype(np.float64)
    np.testing.assert_allclose(xla[0].astype(np.float64), robust_ref.rho_saturated(xs, alpha.numpy(), scale.numpy()),
                               rtol=tol, atol=tol)
    want_dx = g.numpy().astype(np.float64) * robust_ref.drho_dx(xs, alpha.numpy(), scale.numpy())
    np.testing.assert_allclose(xla[1][0].astype(np.float64), want_dx, rtol=10 * tol, atol=10 * tol)
    assert xla[1][1].shape == alpha.shape and xla[1][2].shape == scale.shape
    # The alpha and scale gradients are sums: XLA's result is the kernel's, bit for bit.
    assert_same(xla, plain)


def test_robust_loss_bad_alpha_shape_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda x, a, c: lib.metal_ops_robust_loss(x, a, c), tf.zeros([4, 3]), tf.zeros([2]),
                            tf.ones([]))
    assert "alpha" in message and "[2]" in message


@pytest.mark.cpu_semantics("a run-time check of the CPU kernel and its host handler")
@pytest.mark.parametrize("alpha,scale,what", [(float("nan"), 1.0, "alpha"), (1.0, 0.0, "scale"),
                                             (1.0, -1.0, "scale")])
def test_robust_loss_bad_values_are_run_time_errors(alpha, scale, what):
    """Values the CPU kernel checks are checked by the host handler: an XLA
    error at run time with the kernel's message, never a crash."""
    lib = metal_ops.load_library()
    fn = tf.function(lambda x, a, c: lib.metal_ops_robust_loss(x, a, c), jit_compile=True)
    with pytest.raises(tf.errors.OpError) as xla_error:
        fn(tf.ones([5]), tf.constant(alpha), tf.constant(scale))
    with pytest.raises(tf.errors.OpError) as plain_error:
        lib.metal_ops_robust_loss(tf.ones([5]), tf.constant(alpha), tf.constant(scale))
    assert isinstance(xla_error.value, tf.errors.InvalidArgumentError) and what in str(xla_error.value)
    plain_message = re.sub(r"^\{\{[^}]*\}\} ", "", str(plain_error.value).split(" [Op:")[0])
    assert plain_message in str(xla_error.value)


# ---- DistortionLoss ---------------------------------------------------------------------

@pytest.mark.parametrize("rays,samples", [(33, 24), (5, 1), (0, 8), (4, 0)])
def test_distortion_loss_and_gradients(rays, samples):
    rng = np.random.default_rng(rays + samples)
    w = tf.constant(rng.uniform(0, 1, (rays, samples)).astype(np.float32))
    t = tf.constant(np.cumsum(rng.uniform(0.01, 0.2, (rays, samples + 1)), axis=1).astype(np.float32))
    g = tf.constant(rng.normal(size=(rays,)).astype(np.float32))
    xla, plain = both(with_grad(metal_ops.distortion_loss, w, t, output_grad=g), w, t)
    loss, dw, dt = distortion_ref.reference(w.numpy(), t.numpy())
    np.testing.assert_allclose(xla[0], loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(xla[1][0], g.numpy()[:, None] * dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xla[1][1], g.numpy()[:, None] * dt, rtol=1e-4, atol=1e-4)
    assert_same(xla, plain)


def test_distortion_loss_bad_t_shape_is_a_compile_error():
    message = compile_error(metal_ops.distortion_loss, tf.zeros([3, 4]), tf.zeros([3, 4]))
    assert "DistortionLoss: 't' must be [R, S + 1] = [3, 5] for 'weights' of shape [3,4], got [3,4]" in message


@pytest.mark.cpu_semantics("a run-time check of the CPU kernel and its host handler")
def test_distortion_loss_unsorted_t_is_a_run_time_error():
    t = np.tile(np.arange(5, dtype=np.float32), (3, 1))
    t[2, 3] = 0.5
    with pytest.raises(tf.errors.OpError, match=r"ray 2 has t\[2, 2\] = 2 > t\[2, 3\] = 0.5"):
        tf.function(metal_ops.distortion_loss, jit_compile=True)(tf.ones([3, 4]), tf.constant(t))


# ---- VolumeRender -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rays,samples", [(40, 16), (3, 1), (0, 8), (5, 0)])
@pytest.mark.parametrize("background", [None, "one", "per_ray"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_volume_render_and_gradients(dtype, rays, samples, background, return_weights):
    sigma, rgb, t = (tf.constant(a) for a in vr_ref.make_rays(rays, samples, seed=rays, dtype=dtype, surface=True))
    rng = np.random.default_rng(samples)
    bg = {None: None, "one": tf.constant(rng.uniform(size=3).astype(dtype)),
          "per_ray": tf.constant(rng.uniform(size=(rays, 3)).astype(dtype))}[background]
    cot = [tf.constant(rng.normal(size=s).astype(dtype)) for s in [(rays, 3), (rays,), (rays,), (rays, samples)]]

    def op(sigma, rgb, *bgs):
        out = metal_ops.volume_render(sigma, rgb, t, bgs[0] if bgs else None, early_termination=1e-3,
                                      return_weights=return_weights)
        return [out.rgb, out.depth, out.opacity] + ([out.weights] if return_weights else [])

    args = [sigma, rgb] + ([bg] if bg is not None else [])
    grads = cot if return_weights else cot[:3]
    xla, plain = both(with_grad(op, *args, output_grad=grads), *args)
    want = vr_ref.render(sigma.numpy(), rgb.numpy(), t.numpy(), None if bg is None else bg.numpy(), 1e-3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, ref in zip(xla[0], want):
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    # Exact but for the background's gradient: the wrapper sums [R, 3] over
    # the rays for a [3] background, and XLA orders that sum differently.
    assert_same(xla, plain, rtol=tol / 10, atol=tol / 10)


def test_volume_render_bad_rgb_shape_is_a_compile_error():
    message = compile_error(lambda s, c, t: metal_ops.volume_render(s, c, t).rgb, tf.zeros([4, 5]),
                            tf.zeros([4, 5, 2]), tf.zeros([4, 6]))
    assert "VolumeRender" in message and "'rgb'" in message


@pytest.mark.cpu_semantics("a run-time check of the CPU kernel and its host handler")
def test_volume_render_negative_sigma_is_a_run_time_error():
    sigma = np.ones([3, 4], np.float32)
    sigma[1, 2] = -1.0
    t = np.tile(np.arange(5, dtype=np.float32), (3, 1))
    fn = tf.function(lambda s: metal_ops.volume_render(s, tf.zeros([3, 4, 3]), t).rgb, jit_compile=True)
    with pytest.raises(tf.errors.OpError, match="'sigma' must be non-negative .*: ray 1, sample 2 has sigma = -1"):
        fn(tf.constant(sigma))


# ---- PackedVolumeRender -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("counts", [[5, 0, 12, 1, 30, 7], [0, 0], [], [3]])
@pytest.mark.parametrize("background", [None, "one", "per_ray"])
@pytest.mark.parametrize("return_weights", [False, True])
def test_packed_volume_render_and_gradients(dtype, counts, background, return_weights):
    sigma, rgb, t0, t1, offsets, counts = pvr_ref.make_packed(counts, seed=len(counts), dtype=dtype, surface=True)
    rays, n = len(counts), len(sigma)
    rng = np.random.default_rng(n)
    bg = {None: None, "one": rng.uniform(size=3).astype(dtype), "per_ray": rng.uniform(size=(rays, 3)).astype(dtype)}
    bg = None if bg[background] is None else tf.constant(bg[background])
    cot = [tf.constant(rng.normal(size=s).astype(dtype)) for s in [(rays, 3), (rays,), (rays,), (n,)]]

    def op(sigma, rgb, *bgs):
        out = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, bgs[0] if bgs else None,
                                             early_termination=1e-3, return_weights=return_weights)
        return [out.rgb, out.depth, out.opacity] + ([out.weights] if return_weights else [])

    args = [tf.constant(sigma), tf.constant(rgb)] + ([bg] if bg is not None else [])
    xla, plain = both(with_grad(op, *args, output_grad=cot if return_weights else cot[:3]), *args)
    want = pvr_ref.render(sigma, rgb, t0, t1, offsets, counts, None if bg is None else bg.numpy(), 1e-3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, ref in zip(xla[0], want):
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    assert_same(xla, plain, rtol=tol / 10, atol=tol / 10)  # the [3] background's gradient: a sum XLA orders


def test_packed_volume_render_bad_layout_is_a_run_time_error():
    """The layout (offsets, counts) is data: checked by the host handler with the kernel's message."""
    sigma, rgb, t0, t1, offsets, counts = pvr_ref.make_packed([3, 4], dtype=np.float32)
    fn = tf.function(lambda c: metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, c).rgb, jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as xla_error:
        fn(tf.constant([3, 5], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError) as plain_error:
        metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, tf.constant([3, 5], tf.int32))
    assert "ray_counts" in str(xla_error.value) or "ray_offsets" in str(xla_error.value)
    plain_message = re.sub(r"^\{\{[^}]*\}\} ", "", str(plain_error.value).split(" [Op:")[0])
    assert plain_message in str(xla_error.value)


# ---- FusedConv2D ------------------------------------------------------------------------

@pytest.mark.parametrize("shape,kernel,strides,padding,dilations", [
    ((2, 9, 7, 5), (3, 3), 1, "SAME", 1),
    ((1, 8, 8, 4), (1, 1), 1, "VALID", 1),
    ((2, 11, 10, 3), (3, 2), 2, [[1, 0], [2, 1]], 1),
    ((1, 12, 12, 2), (3, 3), 1, "SAME", 2),
    ((0, 5, 5, 3), (3, 3), 1, "SAME", 1),
])
@pytest.mark.parametrize("bias,residual", [(False, False), (True, True)])
@pytest.mark.parametrize("activation", [None, "relu", "swish", "leaky_relu"])
def test_fused_conv2d_and_gradients(shape, kernel, strides, padding, dilations, bias, residual, activation):
    rng = np.random.default_rng(shape[1] + kernel[0])
    x = tf.constant(rng.normal(size=shape).astype(np.float32))
    w = tf.constant(rng.normal(0, 0.3, size=kernel + (shape[3], 6)).astype(np.float32))
    kw = dict(strides=strides, padding=padding, dilations=dilations, activation=activation, leaky_relu_alpha=0.1)
    out_shape = metal_ops.fused_conv2d(x, w, **kw).shape
    b = tf.constant(rng.normal(size=6).astype(np.float32)) if bias else None
    r = tf.constant(rng.normal(size=out_shape).astype(np.float32)) if residual else None
    g = tf.constant(rng.normal(size=out_shape).astype(np.float32))
    extras = [t for t in (b, r) if t is not None]

    def op(x, w, *extra):
        it = iter(extra)
        return metal_ops.fused_conv2d(x, w, next(it) if bias else None, next(it) if residual else None, **kw)

    # An empty batch: forward only (XLA's own Conv2DBackpropFilter fails on it:
    # "Missing 1-th output").
    fn = op if shape[0] == 0 else with_grad(op, x, w, *extras, output_grad=g)
    xla, plain = both(fn, x, w, *extras)
    if shape[0] == 0:
        xla, plain = [xla], [plain]
    want = conv_ref.reference(x.numpy(), w.numpy(), None if b is None else b.numpy(),
                              None if r is None else r.numpy(), (strides, strides), padding, (dilations, dilations),
                              activation, 0.1)
    np.testing.assert_allclose(xla[0], want, rtol=1e-4, atol=1e-4)
    # The forward and the activation's gradient are the kernels' bits; the
    # convolution gradients are TensorFlow's (XLA's under jit_compile). On a
    # GPU, XLA's convolution gradients differ from TensorFlow's by TF32-sized
    # amounts (docs/XLA.md, "On a GPU").
    np.testing.assert_array_equal(xla[0], plain[0])
    tol = 1e-2 if _ON_GPU[0] else 1e-4
    assert_same(xla, plain, rtol=tol, atol=tol)


def test_fused_conv2d_bad_bias_is_a_compile_error():
    message = compile_error(lambda x, w, b: metal_ops.fused_conv2d(x, w, b), tf.zeros([1, 4, 4, 3]),
                            tf.zeros([3, 3, 3, 5]), tf.zeros([4]))
    assert "bias must have shape [5] (the filter's out_channels), got shape [4]" in message


# ---- Registration ----------------------------------------------------------------------

def _run_child(code, *argv):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], capture_output=True, text=True,
                          timeout=300,
                          env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.cpu_semantics("a property of the process, not of a device")
def test_importing_metal_ops_before_the_first_compile_gives_xla_kernels():
    rc, out = _run_child("""
        import tensorflow as tf
        import metal_ops
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2]))  # XLA's first compilation
        y = tf.function(metal_ops.trunc_exp, jit_compile=True)(tf.zeros([3]))
        print("ok", y.numpy().tolist())
    """)
    assert rc == 0 and "ok [1.0, 1.0, 1.0]" in out, out


@pytest.mark.cpu_semantics("a property of the process, not of a device")
def test_a_library_loaded_after_the_first_compile_has_no_xla_kernels():
    """XLA takes op kernels in once: importing metal_ops after a compilation is too late (docs/XLA.md)."""
    rc, out = _run_child("""
        import warnings
        import tensorflow as tf
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import metal_ops
        print("warned:", [str(w.message) for w in caught if w.category is RuntimeWarning])
        print("has_xla_kernels:", metal_ops._loader.has_xla_kernels(), metal_ops.layers.FusedMLP(4).supports_jit)
        print("runs:", metal_ops.trunc_exp(tf.zeros([2])).numpy().tolist())
        try:
            tf.function(metal_ops.trunc_exp, jit_compile=True)(tf.zeros([3]))
        except tf.errors.InvalidArgumentError as e:
            print("refused:", str(e).splitlines()[0])
    """)
    assert rc == 0 and "refused:" in out and "MetalOpsTruncExp" in out, out
    assert "warned: [\"metal_ops: TensorFlow ran an op in this process before" in out, out
    assert "Import metal_ops right after tensorflow, before any of these" in out, out
    assert "has_xla_kernels: False False" in out and "runs: [1.0, 1.0]" in out, out


@pytest.mark.cpu_semantics("a property of the process, not of a device")
def test_xla_takes_kernels_in_at_tensorflows_first_op_not_at_device_setup():
    """Setting up and listing devices runs no op (metal_ops imported after them compiles under XLA);
    creating a tf.distribute strategy runs one, and the warning then says what to do."""
    code = """
        import sys, warnings
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        tf.config.list_logical_devices()
        if sys.argv[1:] == ["strategy"]:
            tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import metal_ops
        print("warned:", [str(w.message) for w in caught if w.category is RuntimeWarning])
        print("registered:", metal_ops._loader.xla_status()[0])
    """
    rc, out = _run_child(code)
    assert rc == 0 and "registered: True" in out and "warned: []" in out, out
    rc, out = _run_child(code, "strategy")
    assert rc == 0 and "registered: False" in out, out
    assert "TensorFlow ran an op in this process before the metal_ops op library loaded" in out, out
    assert "a tf.distribute strategy runs one" in out and "Import metal_ops right after tensorflow" in out, out
