"""FusedMLP CUDA kernels vs an independent float64 NumPy reference through the
harness (GPU machines only; skips elsewhere).

Tolerances: float32 compares at rtol/atol 2e-4 of the output's scale (the
kernel sums in a different order); float16 elementwise within the bound of
`float16_bound` (docs/FUSED_MLP_GPU.md, "float16 error bound"): the kernel
rounds every layer's activations and every layer's dL/dz to half (as
tiny-cuda-nn does) while the reference stays in float64 on the same
half-valued inputs, weights and dy. float32 on TF32 tensor cores ("tf32",
the harness's _tf32 entry points) elementwise within `tf32_bound`
(docs/FUSED_MLP_GPU.md, "TF32 error bound"), the same model with TF32's
roundings (truncation for the layer path's cuBLAS products);
test_tf32_path_is_used and test_tf32_layer_path_is_used show the TF32
products are the ones run. "tf32_fused" and "tf32_layers" run TF32 through
one implementation whatever the width (the _tf32_impl entry points); float32
runs layer by layer through cuBLAS at every width. cuBLAS obeys
NVIDIA_TF32_OVERRIDE=0, which tests/conftest.py sets unless it is set: the
layer path's TF32 products run only with it set otherwise
(`NVIDIA_TF32_OVERRIDE= python3 -m pytest tests/cuda`).
"""
import ctypes
import os

import numpy as np
import pytest

from tests.activation_codes import activation_code
from tests.cuda.harness import (FUSED_MLP_TF32_IMPL, TF32, TF32_FUSED, TF32_LAYERS, TF32_LAYERS32, TF32_UNSTAGED, check,
                                dptr, fused_mlp_entry, fused_mlp_net, fused_mlp_np_dtype, fused_mlp_suffix,
                                fused_mlp_workspace, fused_mlp_workspace_bytes, pointer_array, require_gpu, stream_ptr)
from tests.reference.fused_mlp import ALPHA
from tests.reference.fused_mlp import assert_within_float16_bound, float16_bound, tf32_bound, tf32_round
from tests.reference.fused_mlp import forward_backward as ref_forward_backward

TF32_LAYER_VARIANTS = [TF32_LAYERS, TF32_LAYERS32, TF32_UNSTAGED]
FLOAT32_DTYPES = [np.float32, TF32, TF32_FUSED, TF32_LAYERS]


def uses_layers(lib, width, impl=0):
    """Whether TF32 at this width runs layer by layer (FusedMlpUsesLayers)."""
    return bool(lib.metal_ops_fused_mlp_tf32_uses_layers(width, impl))


def last_error(lib):
    lib.metal_ops_fused_mlp_last_error.restype = ctypes.c_char_p
    return lib.metal_ops_fused_mlp_last_error().decode()


def run_forward(cupy, lib, x, ws, bs, act, out_act, training=False, tf32=False, impl=0):
    """Returns (y, saved) as CuPy arrays (saved None unless training)."""
    dtype = x.dtype
    n, in_dim = x.shape
    width, hidden, out_dim = ws[0].shape[1], len(ws) - 1, ws[-1].shape[1]
    dx_, dws, dbs = cupy.asarray(x), [cupy.asarray(w) for w in ws], [cupy.asarray(b) for b in bs]
    y = cupy.zeros((n, out_dim), dtype)
    saved = cupy.zeros((hidden, n, width), dtype) if training else None
    fn = fused_mlp_entry(lib, "forward", dtype, tf32, impl)
    check(fn(dptr(dx_), pointer_array(dws), pointer_array(dbs), dptr(y), dptr(saved) if training else None,
             ctypes.c_int64(n), in_dim, width, hidden, out_dim, activation_code(act), activation_code(out_act),
             ctypes.c_float(ALPHA), stream_ptr(cupy)))
    return y, saved, (dx_, dws, dbs)


def run_backward(cupy, lib, dev, y, saved, dy, act, out_act, want_dx=True, want_w=True, ws_buf=None,
                 tf32=False, impl=0):
    x, ws, bs = dev
    dtype = x.dtype
    n, in_dim = x.shape
    width, hidden, out_dim = ws[0].shape[1], len(ws) - 1, ws[-1].shape[1]
    ddy = cupy.asarray(dy)
    dx = cupy.zeros_like(x) if want_dx else None
    gw = [cupy.full(w.shape, np.nan, dtype) if want_w else None for w in ws]
    gb = [cupy.full(b.shape, np.nan, dtype) if want_w else None for b in bs]
    if ws_buf is None:
        ws_buf = fused_mlp_workspace(cupy, lib, n, in_dim, width, hidden, out_dim, dtype, tf32, impl)
    fn = fused_mlp_entry(lib, "backward", dtype, tf32, impl)
    check(fn(dptr(ddy), dptr(x), dptr(y), dptr(saved), pointer_array(ws), pointer_array(bs),
             dptr(dx) if want_dx else None, pointer_array(gw), pointer_array(gb), dptr(ws_buf), ctypes.c_int64(n),
             in_dim, width, hidden, out_dim, activation_code(act), activation_code(out_act), ctypes.c_float(ALPHA),
             stream_ptr(cupy)))
    return dx, gw, gb


def assert_close(got, want, tol, what):
    got = np.asarray(got, np.float64)
    scale = max(1e-3, float(np.max(np.abs(want)))) if want.size else 1.0
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol} * scale {scale:.3g}"


def check_float16(cupy, lib, x, ws, bs, dy, act, out_act):
    """Every result of the float16 kernels within float16_bound of the float64 reference."""
    bound = float16_bound(x, ws, bs, dy, act, out_act, ALPHA)
    y_inf, _, _ = run_forward(cupy, lib, x, ws, bs, act, out_act)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, act, out_act, training=True)
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, dy, act, out_act)
    assert_within_float16_bound(bound, y=cupy.asnumpy(y_inf))
    assert_within_float16_bound(bound, y=cupy.asnumpy(y), hidden=cupy.asnumpy(saved), dx=cupy.asnumpy(dx),
                                dws=[cupy.asnumpy(w) for w in gw], dbs=[cupy.asnumpy(b) for b in gb])
    return dev, y, saved, dy, gw, gb


def check_tf32(cupy, lib, x, ws, bs, dy, act, out_act, impl=0):
    """Every result of the TF32 path within tf32_bound of the float64 reference."""
    truncated = uses_layers(lib, ws[0].shape[1], impl)
    bound = tf32_bound(x, ws, bs, dy, act, out_act, ALPHA, truncated=truncated)
    y_inf, _, _ = run_forward(cupy, lib, x, ws, bs, act, out_act, tf32=True, impl=impl)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, act, out_act, training=True, tf32=True, impl=impl)
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, dy, act, out_act, tf32=True, impl=impl)
    assert_within_float16_bound(bound, y=cupy.asnumpy(y_inf))
    assert_within_float16_bound(bound, y=cupy.asnumpy(y), hidden=cupy.asnumpy(saved), dx=cupy.asnumpy(dx),
                                dws=[cupy.asnumpy(w) for w in gw], dbs=[cupy.asnumpy(b) for b in gb])
    return dev, y, saved, dy, gw, gb


def check_case(cupy, lib, rng, n, in_dim, width, hidden, out_dim, act, out_act, dtype):
    ws, bs = fused_mlp_net(rng, in_dim, width, hidden, out_dim, fused_mlp_np_dtype(dtype))
    x = rng.uniform(-1, 1, (n, in_dim)).astype(fused_mlp_np_dtype(dtype))
    dy = rng.standard_normal((n, out_dim)).astype(fused_mlp_np_dtype(dtype))
    if dtype == np.float16:
        return check_float16(cupy, lib, x, ws, bs, dy, act, out_act)
    if dtype in FUSED_MLP_TF32_IMPL:
        return check_tf32(cupy, lib, x, ws, bs, dy, act, out_act, FUSED_MLP_TF32_IMPL[dtype])
    tol = 2e-4
    want_y, _, _, _, want_h = ref_forward_backward(x, ws, bs, dy, act, out_act)
    y_inf, _, _ = run_forward(cupy, lib, x, ws, bs, act, out_act)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, act, out_act, training=True)
    assert_close(cupy.asnumpy(y_inf), want_y, tol, "y (inference)")
    assert_close(cupy.asnumpy(y), want_y, tol, "y (training)")
    saved_h = cupy.asnumpy(saved).astype(np.float64)
    for l in range(hidden):
        assert_close(saved_h[l], want_h[l], tol, f"saved activation {l}")
    outs = list(saved_h) + [cupy.asnumpy(y).astype(np.float64)]
    _, want_dx, want_dw, want_db, _ = ref_forward_backward(x, ws, bs, dy, act, out_act, outs)
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, dy, act, out_act)
    assert_close(cupy.asnumpy(dx), want_dx, tol, "dx")
    for l in range(hidden + 1):
        assert_close(cupy.asnumpy(gw[l]), want_dw[l], tol, f"dW{l}")
        assert_close(cupy.asnumpy(gb[l]), want_db[l], tol, f"db{l}")
    return dev, y, saved, dy, gw, gb


@pytest.mark.parametrize("dtype", FLOAT32_DTYPES + [np.float16])
@pytest.mark.parametrize("width", [16, 32, 64, 128])
def test_widths(dtype, width):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width)
    check_case(cupy, lib, rng, 1000, 7, width, 2, 3, "relu", "none", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, TF32])
@pytest.mark.parametrize("hidden", [1, 3, 8])
def test_depths(dtype, hidden):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(hidden)
    check_case(cupy, lib, rng, 333, 16, 32, hidden, 16, "relu", "sigmoid", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, TF32])
@pytest.mark.parametrize("act,out_act", [("none", "none"), ("leaky_relu", "relu"),
                                         ("sigmoid", "leaky_relu"), ("relu", "sigmoid"),
                                         ("softplus", "trunc_exp"), ("relu", "softplus")])
def test_activations(dtype, act, out_act):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(3)
    check_case(cupy, lib, rng, 257, 31, 64, 2, 5, act, out_act, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, TF32])
@pytest.mark.parametrize("in_dim,out_dim,n", [(1, 1, 129), (24, 16, 128), (33, 17, 4097),
                                              (128, 128, 200), (3, 3, 1), (12, 20, 17)])
def test_odd_dims(dtype, in_dim, out_dim, n):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(in_dim)
    check_case(cupy, lib, rng, n, in_dim, 64, 2, out_dim, "relu", "none", dtype)


@pytest.mark.parametrize("dtype", FLOAT32_DTYPES + [np.float16])
@pytest.mark.parametrize("width,hidden,in_dim,out_dim,n", [(128, 8, 128, 128, 1000), (128, 4, 40, 24, 3001),
                                                         (16, 3, 128, 128, 777), (64, 8, 128, 3, 5000)])
def test_large_nets(dtype, width, hidden, in_dim, out_dim, n):
    """Deep/wide nets: on float16 these exceed the shared memory that holds
    every weight matrix at once (weights then stream per layer)."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width + hidden)
    check_case(cupy, lib, rng, n, in_dim, width, hidden, out_dim, "relu", "none", dtype)


@pytest.mark.parametrize("dtype", FLOAT32_DTYPES + [np.float16])
def test_many_rows(dtype):
    """More row tiles than the persistent grid holds, and several
    weight-gradient splits with a ragged last one."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(11)
    check_case(cupy, lib, rng, 300_007, 32, 64, 2, 16, "softplus", "sigmoid", dtype)


@pytest.mark.parametrize("dtype", FLOAT32_DTYPES + [np.float16])
def test_empty_batch(dtype):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(0)
    ws, bs = fused_mlp_net(rng, 5, 32, 2, 3, fused_mlp_np_dtype(dtype))
    x = np.zeros((0, 5), fused_mlp_np_dtype(dtype))
    tf32, impl = dtype in FUSED_MLP_TF32_IMPL, FUSED_MLP_TF32_IMPL.get(dtype, 0)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, "relu", "none", training=True, tf32=tf32, impl=impl)
    assert y.shape == (0, 3)
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, np.zeros((0, 3), fused_mlp_np_dtype(dtype)), "relu", "none",
                              tf32=tf32, impl=impl)
    for a in gw + gb:
        assert float(cupy.abs(a).max()) == 0.0


def test_optional_gradients_and_determinism():
    cupy, lib = require_gpu()
    rng = np.random.default_rng(9)
    for dtype in FLOAT32_DTYPES + [np.float16]:
        dev, y, saved, dy, gw, gb = check_case(cupy, lib, rng, 70001, 32, 64, 2, 16, "relu",
                                               "none", dtype)
        tf32, impl = dtype in FUSED_MLP_TF32_IMPL, FUSED_MLP_TF32_IMPL.get(dtype, 0)
        _, gw2, gb2 = run_backward(cupy, lib, dev, y, saved, dy, "relu", "none", want_dx=False, tf32=tf32,
                                   impl=impl)
        for a, b in zip(gw + gb, gw2 + gb2):
            assert cupy.array_equal(a, b), "weight gradients differ between identical runs"
        dx_only, none_w, _ = run_backward(cupy, lib, dev, y, saved, dy, "relu", "none", want_w=False,
                                          tf32=tf32, impl=impl)
        assert none_w[0] is None and dx_only is not None


@pytest.mark.parametrize("dtype", FLOAT32_DTYPES + [np.float16])
def test_workspace_holds_dz_only_where_used(dtype):
    """One [n, width] dL/dz per layer in the backward's workspace only where
    dL/dz goes to memory: float32 layer by layer, and weights streamed
    (float16 width 128 x 8); the backward that forms the weight gradients
    itself (64 x 4, resident) needs only the per-block partials."""
    _, lib = require_gpu()
    n, itemsize = 1 << 18, np.dtype(fused_mlp_np_dtype(dtype)).itemsize
    tf32, impl = dtype in FUSED_MLP_TF32_IMPL, FUSED_MLP_TF32_IMPL.get(dtype, 0)
    one_dz = n * 64 * itemsize
    partials = 5 * min(256, n // 4096) * (64 * 64 + 64) * 4
    resident = fused_mlp_workspace_bytes(lib, n, 64, 64, 4, 64, dtype, tf32, impl)
    layers = uses_layers(lib, 64, impl) if tf32 else dtype == np.float32
    if layers:
        assert resident >= 5 * one_dz, resident
    else:
        assert partials <= resident < partials + 4096, (resident, partials)
    if dtype == np.float16:
        streamed = fused_mlp_workspace_bytes(lib, n, 128, 128, 8, 128, dtype)
        assert streamed >= 9 * n * 128 * itemsize, streamed


@pytest.mark.parametrize("dtype", FLOAT32_DTYPES + [np.float16])
@pytest.mark.parametrize("width,hidden,dims", [(64, 4, 64), (128, 8, 128)])
def test_backward_refuses_a_short_workspace(dtype, width, hidden, dims):
    """A workspace one byte short of metal_ops_fused_mlp_workspace_bytes is
    refused with the launcher's message before anything runs; the exact size
    runs. Resident (64 x 4) and streamed (float16 128 x 8) plans, every float32
    path."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width)
    n, np_dtype = 1000, fused_mlp_np_dtype(dtype)
    tf32, impl = dtype in FUSED_MLP_TF32_IMPL, FUSED_MLP_TF32_IMPL.get(dtype, 0)
    ws, bs = fused_mlp_net(rng, dims, width, hidden, dims, np_dtype)
    x = rng.uniform(-1, 1, (n, dims)).astype(np_dtype)
    dy = rng.standard_normal((n, dims)).astype(np_dtype)
    y, saved, (dx_, dws, dbs) = run_forward(cupy, lib, x, ws, bs, "relu", "none", training=True, tf32=tf32,
                                            impl=impl)
    need = fused_mlp_workspace_bytes(lib, n, dims, width, hidden, dims, dtype, tf32, impl)
    assert need > 0
    buf = cupy.empty(need, cupy.uint8)
    ddy, dx = cupy.asarray(dy), cupy.zeros_like(dx_)
    gw = [cupy.full(w.shape, np.nan, np_dtype) for w in ws]
    gb = [cupy.full(b.shape, np.nan, np_dtype) for b in bs]

    def backward(nbytes):
        return lib.metal_ops_fused_mlp_backward_sized(
            dptr(ddy), dptr(dx_), dptr(y), dptr(saved), pointer_array(dws), pointer_array(dbs), dptr(dx),
            pointer_array(gw), pointer_array(gb), dptr(buf), ctypes.c_int64(nbytes), ctypes.c_int64(n), dims, width,
            hidden, dims, activation_code("relu"), activation_code("none"), ctypes.c_float(ALPHA),
            np.dtype(np_dtype).itemsize, int(tf32), impl, stream_ptr(cupy))

    assert backward(need - 1) != 0, "a short workspace must be refused"
    assert "FusedMLP backward workspace" in last_error(lib)
    cupy.cuda.get_current_stream().synchronize()
    assert all(bool(cupy.isnan(g).all()) for g in gw + gb), "a refused backward wrote gradients"
    assert not bool(dx.any()), "a refused backward wrote dx"
    check(backward(need))
    cupy.cuda.get_current_stream().synchronize()
    assert all(bool(cupy.isfinite(g).all()) for g in gw + gb)


def _forward_error(dtype, width, act):
    """The launcher's error code for a tiny forward (no memory is touched)."""
    cupy, lib = require_gpu()
    x = cupy.zeros((4, 3), fused_mlp_np_dtype(dtype))
    w = (ctypes.c_int64 * 2)(0, 0)
    fn = getattr(lib, f"metal_ops_fused_mlp_forward_{fused_mlp_suffix(fused_mlp_np_dtype(dtype), dtype == TF32)}")
    return fn(dptr(x), w, w, dptr(x), None, ctypes.c_int64(4), 3, width, 1, 3, act, activation_code("none"),
              ctypes.c_float(0.0), stream_ptr(cupy))


@pytest.mark.source_tree("kernels/common/activations.h (the activation codes)")
@pytest.mark.parametrize("dtype", [np.float32, TF32])
def test_bad_shape_rejected(dtype):
    assert _forward_error(dtype, 48, activation_code("relu")) != 0, "width 48 must be rejected"
    assert "FusedMLP shape" in last_error(require_gpu()[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, TF32])
def test_unsupported_activation_rejected(dtype):
    assert _forward_error(dtype, 16, 6) != 0, "tanh (not a FusedMLP activation) must be rejected"


@pytest.mark.parametrize("width", [16, 32, 64, 128])
@pytest.mark.parametrize("n", [17, 65536])
def test_tf32_rows(width, n):
    """TF32 at row counts around and far past one block's rows."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width + n)
    check_case(cupy, lib, rng, n, 24, width, 3, 9, "softplus", "trunc_exp", TF32)


@pytest.mark.parametrize("width,in_dim,out_dim,act", [(128, 64, 16, "relu"), (128, 40, 24, "relu"),
                                                      (64, 128, 128, "relu"), (16, 32, 8, "relu"),
                                                      (128, 64, 16, "softplus")])
@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 65, 8191, 300_007])
@pytest.mark.parametrize("dtype", TF32_LAYER_VARIANTS)
def test_tf32_layers_staged_backward(width, in_dim, out_dim, act, n, dtype):
    """The layer path's staged backward kernels: the ReLU backward, which
    forms each hidden layer's dW from the rows it stages, and the input
    layer's dx and dW (in_dim 16, 32, 64 or 128; 40 takes cuBLAS): fewer rows
    than a chunk, ragged last chunks, more chunks than the grid holds; dz's
    columns padded to 16 (out 24, 8) and wider than the hidden width (64 x
    128); the input layer under a hidden activation other than ReLU. With
    64-row chunks (the H100's), 32-row chunks, and without the kernels."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width + in_dim + out_dim + n)
    check_case(cupy, lib, rng, n, in_dim, width, 3, out_dim, act, "none", dtype)


@pytest.mark.parametrize("width", [16, 64])
def test_tf32_backward_of_an_exact_forward(width):
    """TF32 switched on between the forward and the gradient: the TF32 backward
    gets the exact forward's saved activations, which the fused weight
    gradient takes as TF32 operands without rounding them again (staged
    values are TF32 values on that path), so the tensor cores truncate them.
    Every result stays within the truncated-TF32 bound."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width)
    ws, bs = fused_mlp_net(rng, 24, width, 3, 9, np.float32)
    x = rng.uniform(-1, 1, (3000, 24)).astype(np.float32)
    dy = rng.standard_normal((3000, 9)).astype(np.float32)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, "relu", "none", training=True)  # exact float32
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, dy, "relu", "none", tf32=True)
    bound = tf32_bound(x, ws, bs, dy, "relu", "none", ALPHA, truncated=True)
    assert_within_float16_bound(bound, dx=cupy.asnumpy(dx), dws=[cupy.asnumpy(w) for w in gw],
                                dbs=[cupy.asnumpy(b) for b in gb])


def tf32_and_exact_forward(cupy, lib, seed, width):
    """A ReLU network 64 -> 3 hidden layers of `width` -> 16 and 4096 rows
    drawn from `seed`, run forward (training) on the TF32 and on the exact
    float32 entry points: x, ws, bs, then (y, saved) of each, as NumPy arrays."""
    rng = np.random.default_rng(seed)
    ws, bs = fused_mlp_net(rng, 64, width, 3, 16, np.float32)
    x = rng.uniform(-1, 1, (4096, 64)).astype(np.float32)
    runs = [run_forward(cupy, lib, x, ws, bs, "relu", "none", training=True, tf32=tf32)[:2] for tf32 in (True, False)]
    return (x, ws, bs) + tuple(tuple(cupy.asnumpy(a) for a in run) for run in runs)


def test_tf32_path_is_used():
    """The TF32 entry points run TF32 products: the saved activations are TF32
    values (13 low mantissa bits zero; the exact path's are not), each hidden
    layer is, nearly everywhere to the bit, the TF32 product of the layer
    before (tf32(relu(tf32(h) @ tf32(W) + b)), float32 accumulation) and not
    the exact one, and y lies a hundred times closer (or more) to the TF32 product of
    the last saved layer than to the exact product."""
    cupy, lib = require_gpu()
    _, ws, bs, (y_t, saved_t), (_, saved_e) = tf32_and_exact_forward(cupy, lib, 17, 64)
    assert np.all(saved_t.view(np.uint32) & 0x1FFF == 0), "saved activations of the TF32 path are not TF32 values"
    nonzero = saved_e != 0  # ReLU's zeros are TF32 values on either path
    assert np.mean(saved_e.view(np.uint32)[nonzero] & 0x1FFF != 0) > 0.9, "the exact path's saved activations look TF32"

    def layer(h, w, b, round_w):
        w = tf32_round(w) if round_w else w
        z = tf32_round(h).astype(np.float64) @ w.astype(np.float64) + b
        return z

    for l in range(1, 3):
        tf32_z = layer(saved_t[l - 1], ws[l], bs[l], True)
        exact_z = layer(saved_t[l - 1], ws[l], bs[l], False)
        on = tf32_z > 0  # relu's zeros agree either way
        got = saved_t[l][on]
        same = np.mean(got == tf32_round(tf32_z[on].astype(np.float32)))
        same_exact = np.mean(got == tf32_round(exact_z[on].astype(np.float32)))
        assert same > 0.98 and same_exact < 0.8, (l, same, same_exact)
    tf32_y = layer(saved_t[-1], ws[-1], bs[-1], True)
    exact_y = layer(saved_t[-1], ws[-1], bs[-1], False)
    d_tf32 = np.median(np.abs(y_t - tf32_y))
    d_exact = np.median(np.abs(y_t - exact_y))
    assert d_exact > 100 * d_tf32, (d_tf32, d_exact)


@pytest.mark.parametrize("dtype", [np.float32] + TF32_LAYER_VARIANTS)
@pytest.mark.parametrize("act,out_act,out_dim", [("softplus", "sigmoid", 5), ("relu", "none", 16)])
def test_layer_path_computes_only_what_is_asked(dtype, act, out_act, out_dim):
    """The layer path visits no layer below the lowest wanted gradient, and
    what it computes equals the full backward's bit for bit (cuBLAS and the
    ReLU backward's fixed-order sums are deterministic on one GPU): dW of the
    middle layer alone, dW of the output layer alone (on TF32 with ReLU the
    ReLU backward forms it), db of a hidden layer and of the output layer
    alone, dx alone (on TF32 the input layer's kernel forms dx and dW0)."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(31)
    tf32, impl = dtype in FUSED_MLP_TF32_IMPL, FUSED_MLP_TF32_IMPL.get(dtype, 0)
    ws, bs = fused_mlp_net(rng, 16, 64, 3, out_dim, np.float32)
    x = rng.uniform(-1, 1, (5000, 16)).astype(np.float32)
    dy = rng.standard_normal((5000, out_dim)).astype(np.float32)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, act, out_act, training=True, tf32=tf32, impl=impl)
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, dy, act, out_act, tf32=tf32, impl=impl)
    fn = fused_mlp_entry(lib, "backward", np.float32, tf32, impl)
    for want in (("dw", 0), ("dw", 1), ("dw", 3), ("db", 1), ("db", 3), ("dx", None)):
        one_w = [cupy.full(w.shape, np.nan, np.float32) if want == ("dw", l) else None for l, w in enumerate(ws)]
        one_b = [cupy.full(b.shape, np.nan, np.float32) if want == ("db", l) else None for l, b in enumerate(bs)]
        one_dx = cupy.full(x.shape, np.nan, np.float32) if want[0] == "dx" else None
        wsb = fused_mlp_workspace(cupy, lib, 5000, 16, 64, 3, out_dim, np.float32, tf32, impl)
        check(fn(dptr(cupy.asarray(dy)), dptr(dev[0]), dptr(y), dptr(saved), pointer_array(dev[1]),
                 pointer_array(dev[2]), dptr(one_dx) if one_dx is not None else None, pointer_array(one_w),
                 pointer_array(one_b), dptr(wsb), ctypes.c_int64(5000), 16, 64, 3, out_dim, activation_code(act),
                 activation_code(out_act), ctypes.c_float(ALPHA), stream_ptr(cupy)))
        got = one_dx if want[0] == "dx" else (one_w if want[0] == "dw" else one_b)[want[1]]
        full = dx if want[0] == "dx" else (gw if want[0] == "dw" else gb)[want[1]]
        assert cupy.array_equal(got, full), want


def test_tf32_layer_path_is_used():
    """TF32 at width 128 runs layer by layer through cuBLAS with TF32 allowed:
    its results differ from the exact float32 path's far more than the exact
    path differs from the float64 reference, and lie within the truncated
    TF32 bound (test_widths); its saved activations are float32 values."""
    cupy, lib = require_gpu()
    assert uses_layers(lib, 128) and not uses_layers(lib, 64)
    x, ws, bs, (y_t, saved_t), (y_e, _) = tf32_and_exact_forward(cupy, lib, 41, 128)
    want = ref_forward_backward(x, ws, bs, np.zeros((4096, 16), np.float32), "relu", "none")[0]
    if os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
        # cuBLAS obeys NVIDIA's override (tests/conftest.py sets it unless it is set)
        assert np.array_equal(y_t, y_e), "NVIDIA_TF32_OVERRIDE=0 must give the exact products"
        return
    d_exact = np.median(np.abs(y_e - want))
    d_tf32 = np.median(np.abs(y_t - y_e))
    assert d_tf32 > 30 * d_exact, (d_tf32, d_exact)
    nonzero = saved_t != 0
    assert np.mean(saved_t.view(np.uint32)[nonzero] & 0x1FFF != 0) > 0.9, "layer outputs should be float32"
