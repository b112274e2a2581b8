"""The Metal kernels on the real device (macOS, Apple GPU, tensorflow-metal).

Skipped with the reason everywhere else (no Mac in this project's CI); the
macOS workflow (.github/workflows/macos.yml) sets METAL_OPS_REQUIRE_METAL=1,
which turns that skip into a failure, so a runner without a Metal GPU cannot
pass silently. The shaders themselves are also checked on every machine
through the MSL shim (tests/metal_shim, in each op's tests).
"""
import glob
import os
import platform
import re

import numpy as np
import pytest
import tensorflow as tf

import metal_ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRE = os.environ.get("METAL_OPS_REQUIRE_METAL") == "1"


def _why_no_metal_gpu():
    if platform.system() != "Darwin":
        return f"Metal kernels need macOS with tensorflow-metal; this is {platform.system()}"
    try:
        from importlib import metadata

        metadata.version("tensorflow-metal")
    except Exception:
        return "tensorflow-metal is not installed (pip install -r requirements-macos.txt)"
    if not tf.config.list_physical_devices("GPU"):
        return "tensorflow-metal is installed but TensorFlow sees no GPU device"
    if "metal" not in metal_ops.build_info()["backends"]:
        return "the op library was built without the Metal backend"
    return None


_REASON = _why_no_metal_gpu()
if _REASON is not None and REQUIRE:
    raise RuntimeError(f"METAL_OPS_REQUIRE_METAL=1 but no Metal GPU: {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _declared_ops():
    names = set()
    for path in glob.glob(os.path.join(ROOT, "ops", "*.cc")):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r'REGISTER_OP\(\s*"([A-Za-z0-9_]+)"\s*\)', f.read()))
    return names


def _ops_with_metal_kernels():
    """Declared op names that some kernels/metal/*.mm file mentions as a string."""
    declared = _declared_ops()
    found = set()
    for path in glob.glob(os.path.join(ROOT, "kernels", "metal", "*.mm")):
        with open(path, encoding="utf-8") as f:
            found.update(s for s in re.findall(r'"([A-Za-z0-9_]+)"', f.read()) if s in declared)
    return sorted(found)


@pytest.mark.parametrize("op_name", _ops_with_metal_kernels())
def test_metal_kernel_is_registered_for_gpu(op_name):
    from tensorflow.python.framework import kernels

    metal_ops.load_library()
    devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op_name).kernel}
    assert "GPU" in devices, f"{op_name}: kernels registered for {sorted(devices)}, none for GPU"


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("shape,preserve", [((7,), 3), ((3, 5, 2), 29), ((1_000_003,), 1_000_002), ((0, 4), 9)])
def test_zero_out_on_metal_gpu(dtype, shape, preserve):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    want = np.zeros_like(x)
    if x.size:
        want.flat[preserve] = x.flat[preserve]
    with tf.device("/GPU:0"):
        xt = tf.constant(x)
        y = metal_ops.zero_out(xt, preserve_index=preserve)
    assert "GPU" in y.device, f"ran on {y.device}"
    np.testing.assert_array_equal(y.numpy(), want)


def test_zero_out_on_metal_gpu_in_tf_function():
    f = tf.function(lambda v: metal_ops.zero_out(v, preserve_index=2))
    with tf.device("/GPU:0"):
        y = f(tf.constant([1.5, 2.5, 3.5, 4.5]))
    np.testing.assert_array_equal(y.numpy(), [0, 0, 3.5, 0])


def test_zero_out_bad_index_on_metal_gpu_names_argument():
    with tf.device("/GPU:0"):
        with pytest.raises(tf.errors.InvalidArgumentError, match="preserve_index 5.*'to_zero' with 3 elements"):
            metal_ops.zero_out(tf.constant([1.0, 2.0, 3.0]), preserve_index=5)


# ---- every op on the GPU against its CPU kernel, empty tensors included ------------------
# TF places a Metal kernel's empty inputs and outputs as its EmptyTensor (no
# MTLBuffer): VolumeRender's default weights output [R, 0], S = 0 rays, N = 0
# points, a zero-channel convolution.

def _on(device, fn, *args):
    """fn(*args) and the gradients of the sum of its outputs w.r.t. args, on `device`."""
    with tf.device(device):
        tensors = [tf.constant(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            outputs = tf.nest.flatten(fn(*tensors))
            total = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outputs])
        grads = tape.gradient(total, tensors)
    return [o.numpy() for o in outputs], [None if g is None else g.numpy() for g in grads], outputs


def _assert_gpu_matches_cpu(fn, *args, rtol=1e-4, atol=1e-5):
    cpu_out, cpu_grad, _ = _on("/CPU:0", fn, *args)
    gpu_out, gpu_grad, placed = _on("/GPU:0", fn, *args)
    assert all("GPU" in o.device for o in placed), [o.device for o in placed]
    for a, b in zip(gpu_out + gpu_grad, cpu_out + cpu_grad):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _rays(r, s, seed=0):
    rng = np.random.default_rng(seed)
    sigma = rng.uniform(0, 5, (r, s)).astype(np.float32)
    rgb = rng.uniform(0, 1, (r, s, 3)).astype(np.float32)
    t = np.cumsum(rng.uniform(0.01, 0.1, (r, s + 1)), axis=1).astype(np.float32)
    return sigma, rgb, t


@pytest.mark.parametrize("rays,samples", [(64, 16), (0, 16), (8, 0), (1, 1)])
@pytest.mark.parametrize("return_weights", [False, True])
def test_volume_render_on_metal_gpu(rays, samples, return_weights):
    sigma, rgb, t = _rays(rays, samples)
    _assert_gpu_matches_cpu(
        lambda s, c, tt: metal_ops.volume_render(s, c, tt, return_weights=return_weights), sigma, rgb, t)


@pytest.mark.parametrize("rays,samples", [(64, 16), (0, 4), (5, 0)])
def test_distortion_loss_on_metal_gpu(rays, samples):
    _, _, t = _rays(rays, samples)
    w = np.random.default_rng(1).uniform(0, 1, (rays, samples)).astype(np.float32)
    _assert_gpu_matches_cpu(metal_ops.distortion_loss, w, t)


@pytest.mark.parametrize("shape,channels", [((256, 8), 8), ((0, 8), 8), ((4, 3), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_robust_loss_on_metal_gpu(shape, channels, dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    alpha = rng.uniform(-3, 3, (channels,)).astype(np.float32)
    scale = rng.uniform(0.5, 2, (channels,)).astype(np.float32)
    tol = 1e-2 if dtype == np.float16 else 1e-4
    _assert_gpu_matches_cpu(metal_ops.robust_loss, x, alpha, scale, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [1000, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_hash_encode_on_metal_gpu(n, dtype):
    grid = dict(num_levels=8, log2_hashmap_size=12, base_resolution=4, per_level_scale=1.5)
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (n, 3)).astype(np.float32)
    rows = metal_ops.hash_grid_size(input_dim=3, **grid)
    table = (rng.standard_normal((rows, 2)) * 1e-2).astype(dtype)
    tol = 2e-2 if dtype == np.float16 else 1e-4
    _assert_gpu_matches_cpu(lambda a, b: metal_ops.hash_encode(a, b, **grid), x, table, rtol=tol, atol=tol)


@pytest.mark.parametrize("cin", [4, 0])
@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
def test_fused_conv2d_on_metal_gpu(cin, activation):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 9, 9, cin)).astype(np.float32)
    w = rng.standard_normal((3, 3, cin, 5)).astype(np.float32)
    b = rng.standard_normal((5,)).astype(np.float32)
    r = rng.standard_normal((2, 9, 9, 5)).astype(np.float32)
    # With no input channels the output is activation(bias + residual).
    _assert_gpu_matches_cpu(
        lambda xx, ww, bb, rr: metal_ops.fused_conv2d(xx, ww, bias=bb, residual=rr, activation=activation),
        x, w, b, r, rtol=1e-3, atol=1e-4)


def _mlp(rng, in_dim, width, hidden, out_dim, dtype=np.float32):
    dims = [in_dim] + [width] * hidden + [out_dim]
    ws = [rng.uniform(-1, 1, (a, b)).astype(dtype) / np.sqrt(a).astype(dtype) for a, b in zip(dims[:-1], dims[1:])]
    bs = [rng.uniform(-0.1, 0.1, b).astype(dtype) for b in dims[1:]]
    return ws, bs


def _fused_mlp_fn(layers, activation, output_activation):
    return lambda x, *wb: metal_ops.fused_mlp(x, list(wb[:layers]), list(wb[layers:]), activation=activation,
                                              output_activation=output_activation)


@pytest.mark.parametrize("n", [300, 0])
@pytest.mark.parametrize("in_dim,width,hidden,out_dim,activation,output_activation", [
    (31, 64, 2, 3, "relu", "sigmoid"), (32, 64, 1, 16, "relu", "trunc_exp"), (5, 16, 3, 1, "softplus", "none"),
    (128, 128, 2, 128, "leaky_relu", "relu"), (7, 32, 8, 9, "sigmoid", "softplus")])
def test_fused_mlp_on_metal_gpu(n, in_dim, width, hidden, out_dim, activation, output_activation):
    # float32: the Metal kernel (simdgroup_matrix) against the CPU kernel, gradients included.
    rng = np.random.default_rng(width + hidden)
    ws, bs = _mlp(rng, in_dim, width, hidden, out_dim)
    x = rng.uniform(-1, 1, (n, in_dim)).astype(np.float32)
    _assert_gpu_matches_cpu(_fused_mlp_fn(hidden + 1, activation, output_activation), x, *ws, *bs,
                            rtol=1e-3, atol=1e-4)


def test_fused_mlp_float16_on_metal_gpu():
    # float16 runs on GPUs only: against the float64 NumPy reference, at the
    # float16 tolerance of tests/test_fused_mlp_metal_shim.py.
    from tests.reference.fused_mlp import forward_backward

    rng = np.random.default_rng(16)
    ws, bs = _mlp(rng, 31, 64, 2, 3, np.float16)
    x = rng.uniform(-1, 1, (1000, 31)).astype(np.float16)
    dy = rng.standard_normal((1000, 3)).astype(np.float16)
    fn = _fused_mlp_fn(3, "relu", "none")
    with tf.device("/GPU:0"):
        tensors = [tf.constant(a) for a in [x] + ws + bs]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            y = fn(*tensors)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy.astype(np.float32))
        grads = tape.gradient(loss, tensors)
    want_y, want_dx, want_dw, want_db, _ = forward_backward(x, ws, bs, dy, "relu", "none")
    for got, want in zip([y] + grads, [want_y, want_dx] + want_dw + want_db):
        got = got.numpy().astype(np.float64)
        scale = max(1e-3, float(np.abs(want).max()))
        assert np.all(np.isfinite(got)) and float(np.abs(got - want).max()) <= 3e-2 * scale


def test_fused_mlp_gradients_on_metal_gpu_are_bitwise_reproducible():
    rng = np.random.default_rng(17)
    ws, bs = _mlp(rng, 31, 64, 2, 3)
    x = rng.uniform(-1, 1, (70001, 31)).astype(np.float32)
    fn = _fused_mlp_fn(3, "relu", "sigmoid")
    _, first, _ = _on("/GPU:0", fn, x, *ws, *bs)
    _, second, _ = _on("/GPU:0", fn, x, *ws, *bs)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
