"""FusedMLP Metal shaders, run on the CPU through the MSL shim, vs NumPy.

kernels/fused_mlp/fused_mlp.metal is compiled as C++ (tests/metal_shim/msl_shim.h)
into build/libmetal_shim.so by `make metal-shim` (part of `make test`);
tests/metal_shim/fused_mlp_shim.cc runs the shaders in the order and with the
threadgroup geometry kernels/fused_mlp/fused_mlp_metal.cc uses, each threadgroup's
threads as cooperating fibers (barriers and simdgroup_matrix operations wait
for every thread they involve). The reference is tests/reference/fused_mlp.py
(float64). This checks the shaders' arithmetic, indexing, tiling and
barriers as the shim models them, not Apple's compiler or GPU (never run here).

Tolerances: float32 at 2e-4 of the output's scale (another summation order);
float16 elementwise within the bound of `float16_bound` (docs/FUSED_MLP_GPU.md,
"float16 error bound"): the shaders round every layer's activations and every
dL/dz to half (float32 accumulation), the reference stays float64 on the same
half-valued inputs, weights and dy.
"""
import ctypes
import os

import numpy as np
import pytest

from tests.activation_codes import activation_code
from tests.metal_shim.shim import ROOT, load_shim, ptr
from tests.reference.fused_mlp import ALPHA, assert_within_float16_bound, float16_bound, forward_backward

pytestmark = pytest.mark.source_tree("the Metal shaders (MSL shim)")

DTYPE = {np.float32: 0, np.float16: 1}
WIDTHS = [16, 32, 64, 128]


@pytest.fixture(scope="module")
def shim():
    lib = load_shim()
    vp, i32, i64, f32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float, ctypes.c_uint32
    lib.shim_fused_mlp_error.restype = ctypes.c_char_p
    lib.shim_fused_mlp_geometry.argtypes = [i64, i32, i32, i32, i32, i32, i32, ctypes.POINTER(ctypes.c_int32)]
    lib.shim_fused_mlp_forward.argtypes = [i32, vp, vp, vp, vp, vp, i64, i32, i32, i32, i32, i32, i32, f32, u32, i32]
    lib.shim_fused_mlp_backward.argtypes = [i32, vp, vp, vp, vp, vp, vp, vp, vp, i64, i32, i32, i32, i32, i32, i32,
                                            f32, i32]
    return lib


def _pointers(arrays):
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def make_net(rng, in_dim, width, hidden, out_dim, dtype):
    dims = [in_dim] + [width] * hidden + [out_dim]
    ws, bs = [], []
    for a, b in zip(dims[:-1], dims[1:]):
        lim = np.sqrt(6.0 / (a + b))
        ws.append(np.ascontiguousarray(rng.uniform(-lim, lim, (a, b)).astype(dtype)))
        bs.append(np.ascontiguousarray(rng.uniform(-0.1, 0.1, b).astype(dtype)))
    return ws, bs


def forward(shim, x, ws, bs, act, out_act, max_groups=1 << 20, reverse=False):
    n, in_dim = x.shape
    width, hidden, out_dim = ws[0].shape[1], len(ws) - 1, ws[-1].shape[1]
    y = np.full((n, out_dim), np.nan, x.dtype)
    h = np.full((hidden, n, width), np.nan, x.dtype)
    err = shim.shim_fused_mlp_forward(DTYPE[x.dtype.type], ptr(x), _pointers(ws), _pointers(bs), ptr(y), ptr(h), n,
                                      in_dim, width, hidden, out_dim, activation_code(act), activation_code(out_act),
                                      ALPHA, max_groups, int(reverse))
    assert err == 0, shim.shim_fused_mlp_error().decode()
    return y, h


def backward(shim, dy, x, ws, y, h, act, out_act, reverse=False):
    n, in_dim = x.shape
    width, hidden, out_dim = ws[0].shape[1], len(ws) - 1, ws[-1].shape[1]
    dx = np.full(x.shape, np.nan, x.dtype)
    dws = [np.full(w.shape, np.nan, x.dtype) for w in ws]
    dbs = [np.full(w.shape[1], np.nan, x.dtype) for w in ws]
    err = shim.shim_fused_mlp_backward(DTYPE[x.dtype.type], ptr(dy), ptr(x), _pointers(ws), ptr(y), ptr(h), ptr(dx),
                                       _pointers(dws), _pointers(dbs), n, in_dim, width, hidden, out_dim,
                                       activation_code(act), activation_code(out_act), ALPHA, int(reverse))
    assert err == 0, shim.shim_fused_mlp_error().decode()
    return dx, dws, dbs


def assert_close(got, want, tol, what):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if not want.size:
        return
    scale = max(1e-3, float(np.max(np.abs(want))))
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    err = float(np.max(np.abs(got - want)))
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol} * scale {scale:.3g}"


def check_case(shim, n, in_dim, width, hidden, out_dim, act, out_act, dtype, seed=0):
    rng = np.random.default_rng(seed)
    ws, bs = make_net(rng, in_dim, width, hidden, out_dim, dtype)
    x = np.ascontiguousarray(rng.uniform(-1, 1, (n, in_dim)).astype(dtype))
    dy = np.ascontiguousarray(rng.standard_normal((n, out_dim)).astype(dtype))
    if dtype == np.float16:
        bound = float16_bound(x, ws, bs, dy, act, out_act, ALPHA)
        y, h = forward(shim, x, ws, bs, act, out_act)
        dx, dws, dbs = backward(shim, dy, x, ws, y, h, act, out_act)
        assert_within_float16_bound(bound, y=y, hidden=h, dx=dx, dws=dws, dbs=dbs)
        return (x, ws, bs, dy), (y, h), (dx, dws, dbs)
    tol = 2e-4
    want_y, _, _, _, want_h = forward_backward(x, ws, bs, dy, act, out_act)
    y, h = forward(shim, x, ws, bs, act, out_act)
    assert_close(y, want_y, tol, "y")
    for l in range(hidden):
        assert_close(h[l], want_h[l], tol, f"hidden[{l}]")
    outs = [h[l] for l in range(hidden)] + [y]
    _, want_dx, want_dw, want_db, _ = forward_backward(x, ws, bs, dy, act, out_act, outs)
    dx, dws, dbs = backward(shim, dy, x, ws, y, h, act, out_act)
    assert_close(dx, want_dx, tol, "grad_x")
    for l in range(hidden + 1):
        assert_close(dws[l], want_dw[l], tol, f"grad_kernels[{l}]")
        assert_close(dbs[l], want_db[l], tol, f"grad_biases[{l}]")
    return (x, ws, bs, dy), (y, h), (dx, dws, dbs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("width", WIDTHS)
def test_every_width(shim, width, dtype):
    # 77 rows: not a multiple of any row tile (8 to 32 rows).
    check_case(shim, 77, 7, width, 2, 3, "relu", "none", dtype, seed=width)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("hidden", [1, 3, 8])
def test_depths(shim, hidden, dtype):
    check_case(shim, 45, 16, 32, hidden, 16, "relu", "sigmoid", dtype, seed=hidden)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("act,out_act", [("none", "none"), ("leaky_relu", "relu"), ("sigmoid", "leaky_relu"),
                                         ("relu", "sigmoid"), ("softplus", "trunc_exp"), ("relu", "softplus")])
def test_activations(shim, act, out_act, dtype):
    check_case(shim, 40, 9, 16, 2, 5, act, out_act, dtype, seed=3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("in_dim,out_dim,width,n", [(1, 1, 16, 9), (31, 3, 64, 50), (33, 17, 32, 23),
                                                    (128, 128, 16, 17), (128, 5, 128, 12), (3, 128, 128, 8)])
def test_odd_input_and_output_widths(shim, in_dim, out_dim, width, n, dtype):
    check_case(shim, n, in_dim, width, 2, out_dim, "relu", "none", dtype, seed=in_dim)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_empty_batch(shim, dtype):
    rng = np.random.default_rng(0)
    ws, bs = make_net(rng, 5, 32, 2, 3, dtype)
    x = np.zeros((0, 5), dtype)
    y, h = forward(shim, x, ws, bs, "relu", "none")
    assert y.shape == (0, 3) and h.shape == (2, 0, 32)
    dx, dws, dbs = backward(shim, np.zeros((0, 3), dtype), x, ws, y, h, "relu", "none")
    assert dx.shape == (0, 5)
    for g in dws + dbs:
        assert np.all(g == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_bitwise_the_same_in_any_thread_order_and_grid(shim, dtype):
    """Threads run in reverse between barriers (a missing barrier would change
    results), the forward's grid capped so threadgroups loop over tiles, and a
    second run: every output bitwise equal (the weight gradients' sums have
    one fixed order)."""
    (x, ws, bs, dy), (y, h), grads = check_case(shim, 130, 12, 32, 2, 4, "leaky_relu", "none", dtype, seed=7)
    y2, h2 = forward(shim, x, ws, bs, "leaky_relu", "none", max_groups=2, reverse=True)
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_array_equal(h2, h)
    for again in (backward(shim, dy, x, ws, y, h, "leaky_relu", "none", reverse=True),
                  backward(shim, dy, x, ws, y, h, "leaky_relu", "none")):
        for a, b in zip([again[0]] + again[1] + again[2], [grads[0]] + grads[1] + grads[2]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_partitions_of_several_tiles(shim, dtype):
    """More row tiles than the 256 weight-gradient partitions: each
    threadgroup of the backward adds several tiles into its partial."""
    out = (ctypes.c_int32 * 5)()
    n = 8300
    assert shim.shim_fused_mlp_geometry(n, 3, 16, 1, 2, np.dtype(dtype).itemsize, 1, out) == 0
    rows, partitions = out[1], out[4]
    assert partitions == 256 and n > rows * partitions  # some partitions hold 2 tiles
    check_case(shim, n, 3, 16, 1, 2, "softplus", "sigmoid", dtype, seed=11)


def test_threadgroup_memory_fits_every_network(shim):
    """32 KiB per threadgroup (Apple GPUs) for every width, float32 and
    float16, every padded input/output width, forward and backward."""
    out = (ctypes.c_int32 * 5)()
    for width in WIDTHS:
        for elem in (4, 2):
            for io in range(1, 129, 7):
                for backward_pass in (0, 1):
                    assert shim.shim_fused_mlp_geometry(1000, io, width, 2, 129 - io, elem, backward_pass, out) == 0
                    simdgroups, rows, chunk, tg_bytes, partitions = list(out)
                    assert simdgroups in (1, 2, 4) and rows == 8 * simdgroups
                    assert chunk % 8 == 0 and 8 <= chunk <= 128
                    assert 0 < tg_bytes <= 32768 and tg_bytes % 16 == 0
                    assert 1 <= partitions <= 256
    # The NeRF colour network (31 -> 64 -> 64 -> 3) keeps 4 SIMD-groups and a whole layer's weights.
    assert shim.shim_fused_mlp_geometry(98304, 31, 64, 2, 3, 4, 0, out) == 0
    assert list(out)[:3] == [4, 32, 64]


# ---- the shim's threadgroups and simdgroup_matrix themselves ----------------------------
# (tests/metal_shim/simdgroup_matrix_shim.cc: small kernels written like MSL)

@pytest.mark.parametrize("operands", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("transpose_a,transpose_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_simdgroup_multiply_accumulate_matches_numpy(shim, operands, transpose_a, transpose_b):
    """MSL: simdgroup_load reads row r at src + r * elements_per_row (or the
    transpose), simdgroup_multiply_accumulate gives a * b + c, float32
    accumulation for half operands."""
    rng = np.random.default_rng(transpose_a * 2 + transpose_b)
    stride = 11
    a = np.ascontiguousarray(rng.standard_normal((8, stride)).astype(operands))
    b = np.ascontiguousarray(rng.standard_normal((8, stride)).astype(operands))
    c = np.ascontiguousarray(rng.standard_normal((8, stride)).astype(np.float32))
    d = np.full((8, stride), 99.0, np.float32)
    shim.shim_simdgroup_multiply.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4
    shim.shim_simdgroup_error.restype = ctypes.c_char_p
    assert shim.shim_simdgroup_multiply(ptr(a), ptr(b), ptr(c), ptr(d), stride, transpose_a, transpose_b,
                                        int(operands == np.float16)) == 0, shim.shim_simdgroup_error()
    ma, mb = a[:, :8].astype(np.float64), b[:, :8].astype(np.float64)
    want = (ma.T if transpose_a else ma) @ (mb.T if transpose_b else mb) + c[:, :8]
    np.testing.assert_allclose(d[:, :8], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(d[:, 8:], 99.0)  # the store keeps to 8 columns of each row


@pytest.mark.parametrize("which,message", [
    (0, "never arrive"),                 # threadgroup_barrier that half the threads skip
    (1, "disagree"),                     # lanes of one simdgroup_load at different addresses
    (2, "read different values"),        # another lane's write read without a barrier
    (3, "never arrive"),                 # simdgroup_store in divergent control flow
])
def test_shim_refuses_what_msl_forbids(shim, which, message):
    shim.shim_simdgroup_error.restype = ctypes.c_char_p
    assert shim.shim_simdgroup_broken(which) == -1
    assert message in shim.shim_simdgroup_error().decode()


def test_geometry_fits_pipelines_of_fewer_threads(shim):
    """A width-128 pipeline may run fewer threads per threadgroup than 4
    SIMD-groups (maxTotalThreadsPerThreadgroup): the geometry then takes fewer
    SIMD-groups, and none below one SIMD-group's 32 threads."""
    fn = shim.shim_fused_mlp_geometry_max_threads
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_int] * 6 + [ctypes.c_int64, ctypes.POINTER(ctypes.c_int32)]
    out = (ctypes.c_int32 * 5)()
    for width in (64, 128):
        for backward_pass in (0, 1):
            assert fn(5000, 32, width, 2, 16, 4, backward_pass, 1024, out) == 0
            unlimited = out[0]  # what threadgroup memory allows
            for max_threads in (128, 96, 64, 63, 32):
                assert fn(5000, 32, width, 2, 16, 4, backward_pass, max_threads, out) == 0
                want = max(s for s in (1, 2, 4) if s <= unlimited and 32 * s <= max_threads)
                assert out[0] == want and out[1] == 8 * want, (width, backward_pass, max_threads)
            assert fn(5000, 32, width, 2, 16, 4, backward_pass, 31, out) == -1
    assert fn(5000, 32, 64, 2, 16, 4, 0, 1024, out) == 0 and out[0] == 4  # the limit bites below 128 threads
    # The Metal glue recomputes the geometry from the tile pipeline's limit before it
    # builds the plan from it (the backward's partials follow the geometry).
    with open(os.path.join(ROOT, "kernels", "fused_mlp", "fused_mlp_metal.cc"), encoding="utf-8") as f:
        text = f.read()
    for kind in ("void Forward(", "void Backward("):
        body = text.split(kind, 1)[1].split("\n}\n", 1)[0]
        assert body.index("FitGeometry(") < body.index("call.RunPlan(")
