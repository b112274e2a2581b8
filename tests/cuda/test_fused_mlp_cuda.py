"""FusedMLP CUDA kernels vs an independent float64 NumPy reference through the
harness (GPU machines only; skips elsewhere).

Tolerances: float32 compares at rtol/atol 2e-4 of the output's scale (the
kernel sums in a different order); float16 elementwise within the bound of
`float16_bound` (docs/FUSED_MLP_GPU.md, "float16 error bound"): the kernel
rounds every layer's activations and every layer's dL/dz to half (as
tiny-cuda-nn does) while the reference stays in float64 on the same
half-valued inputs, weights and dy.
"""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference.fused_mlp import ALPHA
from tests.reference.fused_mlp import assert_within_float16_bound, float16_bound
from tests.reference.fused_mlp import forward_backward as ref_forward_backward

# mo::Activation codes (kernels/common/activations.h)
ACT = {"none": 0, "relu": 1, "leaky_relu": 4, "sigmoid": 5, "softplus": 8, "trunc_exp": 9}


def make_net(rng, in_dim, width, hidden, out_dim, dtype):
    dims = [in_dim] + [width] * hidden + [out_dim]
    ws, bs = [], []
    for a, b in zip(dims[:-1], dims[1:]):
        lim = np.sqrt(6.0 / (a + b))
        ws.append(rng.uniform(-lim, lim, (a, b)).astype(dtype))
        bs.append(rng.uniform(-0.1, 0.1, b).astype(dtype))
    return ws, bs


def _ptrs(arrays):
    return (ctypes.c_int64 * max(1, len(arrays)))(*[0 if a is None else a.data.ptr for a in arrays])


def _suffix(dtype):
    return "float16" if dtype == np.float16 else "float32"


def run_forward(cupy, lib, x, ws, bs, act, out_act, training=False):
    """Returns (y, saved) as CuPy arrays (saved None unless training)."""
    dtype = x.dtype
    n, in_dim = x.shape
    width, hidden, out_dim = ws[0].shape[1], len(ws) - 1, ws[-1].shape[1]
    dx_, dws, dbs = cupy.asarray(x), [cupy.asarray(w) for w in ws], [cupy.asarray(b) for b in bs]
    y = cupy.zeros((n, out_dim), dtype)
    saved = cupy.zeros((hidden, n, width), dtype) if training else None
    fn = getattr(lib, f"metal_ops_fused_mlp_forward_{_suffix(dtype)}")
    check(fn(dptr(dx_), _ptrs(dws), _ptrs(dbs), dptr(y), dptr(saved) if training else None,
             ctypes.c_int64(n), in_dim, width, hidden, out_dim, ACT[act], ACT[out_act],
             ctypes.c_float(ALPHA), stream_ptr(cupy)))
    return y, saved, (dx_, dws, dbs)


def workspace(cupy, lib, n, in_dim, width, hidden, out_dim, dtype):
    lib.metal_ops_fused_mlp_workspace_bytes.restype = ctypes.c_int64
    nbytes = lib.metal_ops_fused_mlp_workspace_bytes(ctypes.c_int64(n), in_dim, width, hidden,
                                                     out_dim, np.dtype(dtype).itemsize)
    return cupy.empty(max(1, nbytes), cupy.uint8)


def run_backward(cupy, lib, dev, y, saved, dy, act, out_act, want_dx=True, want_w=True, ws_buf=None):
    x, ws, bs = dev
    dtype = x.dtype
    n, in_dim = x.shape
    width, hidden, out_dim = ws[0].shape[1], len(ws) - 1, ws[-1].shape[1]
    ddy = cupy.asarray(dy)
    dx = cupy.zeros_like(x) if want_dx else None
    gw = [cupy.full(w.shape, np.nan, dtype) if want_w else None for w in ws]
    gb = [cupy.full(b.shape, np.nan, dtype) if want_w else None for b in bs]
    if ws_buf is None:
        ws_buf = workspace(cupy, lib, n, in_dim, width, hidden, out_dim, dtype)
    fn = getattr(lib, f"metal_ops_fused_mlp_backward_{_suffix(dtype)}")
    check(fn(dptr(ddy), dptr(x), dptr(y), dptr(saved), _ptrs(ws), _ptrs(bs),
             dptr(dx) if want_dx else None, _ptrs(gw), _ptrs(gb), dptr(ws_buf), ctypes.c_int64(n),
             in_dim, width, hidden, out_dim, ACT[act], ACT[out_act], ctypes.c_float(ALPHA),
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


def check_case(cupy, lib, rng, n, in_dim, width, hidden, out_dim, act, out_act, dtype):
    ws, bs = make_net(rng, in_dim, width, hidden, out_dim, dtype)
    x = rng.uniform(-1, 1, (n, in_dim)).astype(dtype)
    dy = rng.standard_normal((n, out_dim)).astype(dtype)
    if dtype == np.float16:
        return check_float16(cupy, lib, x, ws, bs, dy, act, out_act)
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


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("width", [16, 32, 64, 128])
def test_widths(dtype, width):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width)
    check_case(cupy, lib, rng, 1000, 7, width, 2, 3, "relu", "none", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("hidden", [1, 3, 8])
def test_depths(dtype, hidden):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(hidden)
    check_case(cupy, lib, rng, 333, 16, 32, hidden, 16, "relu", "sigmoid", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,out_act", [("none", "none"), ("leaky_relu", "relu"),
                                         ("sigmoid", "leaky_relu"), ("relu", "sigmoid"),
                                         ("softplus", "trunc_exp"), ("relu", "softplus")])
def test_activations(dtype, act, out_act):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(3)
    check_case(cupy, lib, rng, 257, 31, 64, 2, 5, act, out_act, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("in_dim,out_dim,n", [(1, 1, 129), (24, 16, 128), (33, 17, 4097),
                                              (128, 128, 200), (3, 3, 1)])
def test_odd_dims(dtype, in_dim, out_dim, n):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(in_dim)
    check_case(cupy, lib, rng, n, in_dim, 64, 2, out_dim, "relu", "none", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("width,hidden,in_dim,out_dim,n", [(128, 8, 128, 128, 1000), (128, 4, 40, 24, 3001),
                                                         (16, 3, 128, 128, 777), (64, 8, 128, 3, 5000)])
def test_large_nets(dtype, width, hidden, in_dim, out_dim, n):
    """Deep/wide nets: on float16 these exceed the shared memory that holds
    every weight matrix at once (weights then stream per layer)."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(width + hidden)
    check_case(cupy, lib, rng, n, in_dim, width, hidden, out_dim, "relu", "none", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_many_rows(dtype):
    """More row tiles than the persistent grid holds, and several
    weight-gradient splits with a ragged last one."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(11)
    check_case(cupy, lib, rng, 300_007, 32, 64, 2, 16, "softplus", "sigmoid", dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_empty_batch(dtype):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(0)
    ws, bs = make_net(rng, 5, 32, 2, 3, dtype)
    x = np.zeros((0, 5), dtype)
    y, saved, dev = run_forward(cupy, lib, x, ws, bs, "relu", "none", training=True)
    assert y.shape == (0, 3)
    dx, gw, gb = run_backward(cupy, lib, dev, y, saved, np.zeros((0, 3), dtype), "relu", "none")
    for a in gw + gb:
        assert float(cupy.abs(a).max()) == 0.0


def test_optional_gradients_and_determinism():
    cupy, lib = require_gpu()
    rng = np.random.default_rng(9)
    for dtype in (np.float32, np.float16):
        dev, y, saved, dy, gw, gb = check_case(cupy, lib, rng, 70001, 32, 64, 2, 16, "relu",
                                               "none", dtype)
        _, gw2, gb2 = run_backward(cupy, lib, dev, y, saved, dy, "relu", "none", want_dx=False)
        for a, b in zip(gw + gb, gw2 + gb2):
            assert cupy.array_equal(a, b), "weight gradients differ between identical runs"
        dx_only, none_w, _ = run_backward(cupy, lib, dev, y, saved, dy, "relu", "none", want_w=False)
        assert none_w[0] is None and dx_only is not None


def _forward_error(dtype, width, act):
    """The launcher's error code for a tiny forward (no memory is touched)."""
    cupy, lib = require_gpu()
    x = cupy.zeros((4, 3), dtype)
    w = (ctypes.c_int64 * 2)(0, 0)
    fn = getattr(lib, f"metal_ops_fused_mlp_forward_{_suffix(dtype)}")
    return fn(dptr(x), w, w, dptr(x), None, ctypes.c_int64(4), 3, width, 1, 3, act, 0,
              ctypes.c_float(0.0), stream_ptr(cupy))


def test_bad_shape_rejected():
    assert _forward_error(np.float32, 48, ACT["relu"]) != 0, "width 48 must be rejected"


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_unsupported_activation_rejected(dtype):
    assert _forward_error(dtype, 16, 6) != 0, "tanh (not a FusedMLP activation) must be rejected"
