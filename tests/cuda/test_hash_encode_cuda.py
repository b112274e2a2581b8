"""HashEncode CUDA kernels (forward, backward, second order) vs the NumPy
reference, through the C-ABI harness.

Runs where a GPU, CuPy and build/libmetal_ops_cuda.so exist (`make
cuda-harness`); elsewhere every test skips and says why.
No TensorFlow here. Reference: tests/reference/hash_encode.py (independent,
written from the formulas).
"""
import numpy as np
import pytest

from tests.reference import hash_encode as ref
from tests.cuda.harness import bind_hash_encode, check, dptr, require_gpu, stream_ptr

DTYPES = {"float32": (np.float32, 0), "float16": (np.float16, 1)}
FEATURES = (1, 2, 4, 8)
DIMS = (1, 2, 3, 4)

# Standard NeRF grid (D=3, L=16, F=2, 2^19 rows, base 16, finest 2048). Its
# level scales are not exact floats: float32 exp2 differs by an ulp between
# NumPy, glibc and CUDA at some levels (seen: levels 9 and 13), which moves
# positions by up to ~1e-4 cells, so comparisons on such grids use LOOSE
# tolerances (relative to the largest value); the power-of-two grids of
# small_grid() are exact and compared tightly.
STANDARD = dict(num_levels=16, log2_hashmap_size=19, base_resolution=16,
                per_level_scale=float(np.exp(np.log(2048 / 16) / 15)))
LOOSE = 2e-3


def small_grid(dims, per_level_scale=2.0):
    """8 levels, the coarse ones dense and the fine ones hashed, for any D.

    per_level_scale 2 makes every level scale an exact float (3 * 2^l - 1),
    so the reference and the GPU agree on every cell bit for bit."""
    return dict(num_levels=8, log2_hashmap_size=2 * dims + 6, base_resolution=3, per_level_scale=per_level_scale)


def gpu():
    cupy, lib = require_gpu()
    return cupy, bind_hash_encode(lib)


def make_inputs(rng, n, dims, out_of_range_fraction=0.0, nan_rows=0):
    x = rng.random((n, dims), dtype=np.float32)
    if n >= 4:
        x[0, :] = 0.0
        x[1, :] = 1.0
    if out_of_range_fraction and n:
        k = max(1, int(n * out_of_range_fraction))
        rows = rng.choice(n, size=k, replace=False)
        x[rows] = rng.uniform(-0.4, 1.4, size=(k, dims)).astype(np.float32)
    if nan_rows and n > nan_rows + 4:
        bad = [np.nan, np.inf, -np.inf]
        for j in range(nan_rows):
            x[2 + j, j % dims] = bad[j % 3]
    return x


def make_table(rng, rows, features, dtype):
    return rng.uniform(-1, 1, size=(rows, features)).astype(dtype)


def run_forward(cupy, lib, x, table, grid, interpolation="linear", out_of_range="clamp"):
    n, dims = x.shape
    features = table.shape[1]
    dtype, code = DTYPES[np.dtype(table.dtype).name]
    d_x, d_t = cupy.asarray(x), cupy.asarray(table)
    d_out = cupy.full((n, grid["num_levels"] * features), 7, dtype=dtype)  # sentinel: must be overwritten
    check(lib.metal_ops_hash_encode_forward(
        dptr(d_x), dptr(d_t), dptr(d_out), code, n, dims, features, grid["num_levels"], grid["log2_hashmap_size"],
        grid["base_resolution"], grid["per_level_scale"], ref.INTERPOLATIONS[interpolation],
        ref.OUT_OF_RANGE[out_of_range], stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_out)


def run_backward(cupy, lib, dy, x, table, grid, interpolation="linear", out_of_range="clamp", *,
                 input_grad=True, deterministic=False, aggregate=-1, table_grad=True):
    n, dims = x.shape
    features = table.shape[1]
    dtype, code = DTYPES[np.dtype(table.dtype).name]
    args = (code, n, dims, features, grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"],
            grid["per_level_scale"])
    ws_bytes = lib.metal_ops_hash_encode_backward_workspace_bytes(*args, int(table_grad), int(input_grad),
                                                                  int(deterministic))
    assert ws_bytes >= 0
    d_ws = cupy.empty(max(ws_bytes, 1), dtype=cupy.uint8)
    d_dy, d_x, d_t = cupy.asarray(dy), cupy.asarray(x), cupy.asarray(table)
    d_gt = cupy.full(table.shape, 7, dtype=dtype)
    d_gi = cupy.full((n, dims), 7, dtype=cupy.float32)
    check(lib.metal_ops_hash_encode_backward(
        # Both outputs are always passed: the launcher must leave alone the one not requested.
        dptr(d_dy), dptr(d_x), dptr(d_t), dptr(d_gt), dptr(d_gi), dptr(d_ws), ws_bytes,
        *args, ref.INTERPOLATIONS[interpolation], ref.OUT_OF_RANGE[out_of_range], int(table_grad),
        int(input_grad), int(deterministic), aggregate, stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_gt), cupy.asnumpy(d_gi)


def assert_close(actual, expected, rtol, atol_fraction, what):
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol_fraction * scale,
                               err_msg=what)


def check_input_grad(actual, expected, margin, rtol=2e-4, atol_fraction=1e-4, min_margin=1e-5, min_fraction=0.9):
    # Points within rounding of a cell boundary may legitimately fall in the
    # neighbouring cell, where the gradient is different (on exact grids only
    # the reference's float64 weights differ; on LOOSE grids the level scale).
    safe = margin > min_margin
    assert safe.size == 0 or safe.mean() >= min_fraction, f"only {safe.mean():.3f} of points away from boundaries"
    assert np.all(np.isfinite(actual))
    assert_close(actual[safe], expected[safe], rtol, atol_fraction, "grad_inputs")


# ---- grid size --------------------------------------------------------------------------------

# 32 levels of up to 2^30 rows: P passes 2^32 (64-bit offsets). Its level
# scales stay >= 0.018 away from integers, so float32 exp2 rounding (NumPy vs
# glibc) cannot change a resolution; with scales of ~1e7 (e.g. 2 * 1.7^31) a
# one-ulp difference changes a dense 1-D level's row count.
BIG = dict(num_levels=32, log2_hashmap_size=30, base_resolution=2, per_level_scale=1.33)


@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("grid", [STANDARD, small_grid(2), BIG])
def test_table_rows_match_reference(dims, grid):
    levels = ref.levels(dims, **grid)
    assert all(abs(float(lv.scale) - round(float(lv.scale))) > 1e-2 for lv in levels[1:]
               if grid is BIG), "test grid must keep level scales away from integers"
    _, lib = gpu()
    rows = lib.metal_ops_hash_encode_table_rows(dims, grid["num_levels"], grid["log2_hashmap_size"],
                                                grid["base_resolution"], grid["per_level_scale"])
    assert rows == ref.table_rows(dims, **grid)


def test_standard_grid_size_matches_tiny_cuda_nn():
    _, lib = gpu()
    rows = lib.metal_ops_hash_encode_table_rows(3, 16, 19, 16, STANDARD["per_level_scale"])
    assert rows * 2 == 12_196_240  # instant-NGP's parameter count for F = 2


def test_bad_arguments_return_errors():
    cupy, lib = gpu()
    assert lib.metal_ops_hash_encode_table_rows(5, 8, 12, 3, 2.0) == -1
    # The op's grid checks (kernels/hash_encode/hash_encode.h Grid): levels, hashmap size, scale, finest level.
    for bad in ((3, 33, 12, 3, 2.0), (3, 8, 31, 3, 2.0), (3, 8, 12, 0, 2.0), (3, 8, 12, 3, 0.5),
                (3, 8, 12, 1 << 20, 8.0)):
        assert lib.metal_ops_hash_encode_table_rows(*bad) == -1, bad
    x = cupy.zeros((4, 3), dtype=cupy.float32)
    t = cupy.zeros((ref.table_rows(3, **small_grid(3)), 3), dtype=cupy.float32)
    out = cupy.zeros((4, 24), dtype=cupy.float32)
    g = small_grid(3)
    err = lib.metal_ops_hash_encode_forward(dptr(x), dptr(t), dptr(out), 0, 4, 3, 3, g["num_levels"],
                                            g["log2_hashmap_size"], g["base_resolution"], g["per_level_scale"],
                                            0, 0, stream_ptr(cupy))
    assert err != 0  # F = 3 is unsupported


# ---- forward ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("out_of_range", ["clamp", "wrap", "zero"])
def test_forward_matches_reference(dims, features, dtype, interpolation, out_of_range):
    cupy, lib = gpu()
    rng = np.random.default_rng(dims * 100 + features)
    grid = small_grid(dims)
    levels, rows = ref.levels(dims, **grid), ref.table_rows(dims, **grid)
    assert any(lv.hashed for lv in levels) and not all(lv.hashed for lv in levels)
    x = make_inputs(rng, 1000, dims, out_of_range_fraction=0.2, nan_rows=6)
    table = make_table(rng, rows, features, DTYPES[dtype][0])
    got = run_forward(cupy, lib, x, table, grid, interpolation, out_of_range)
    want = ref.encode(x, table, interpolation=interpolation, out_of_range=out_of_range, **grid)
    assert got.dtype == table.dtype and got.shape == (1000, 8 * features)
    if dtype == "float32":
        assert_close(got, want, 1e-5, 2e-6, "encoded")
    else:
        assert_close(got, want.astype(np.float16).astype(np.float64), 1e-3, 1e-3, "encoded")
    bad = ~np.isfinite(x).all(axis=1)
    assert np.all(got[bad] == 0), "NaN / inf points must encode to zero"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("n", [0, 1, 1000, 2 ** 17])
def test_forward_sizes_standard_scale(n, dtype):
    cupy, lib = gpu()
    rng = np.random.default_rng(n)
    grid = dict(STANDARD, log2_hashmap_size=15)  # non-power-of-two level scale, hashed fine levels
    rows = ref.table_rows(3, **grid)
    x = make_inputs(rng, n, 3)
    table = make_table(rng, rows, 2, DTYPES[dtype][0])
    got = run_forward(cupy, lib, x, table, grid)
    want = ref.encode(x, table, **grid)
    assert got.shape == (n, 32)
    assert_close(got, want, LOOSE, LOOSE, "encoded")



@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_forward_level_groups_of_the_standard_grid(dtype):
    """The issue's grid (2^19 rows per level): by default the forward puts the
    small coarse levels 0-7 in one group and the hashed 8-15 in groups of 4
    (float32), blocks of both shapes in one launch. Results equal fixed
    groupings bit for bit, and the reference."""
    cupy, lib = gpu()
    rng = np.random.default_rng(11)
    n = 3000
    x = make_inputs(rng, n, 3, out_of_range_fraction=0.1, nan_rows=3)
    table = make_table(rng, ref.table_rows(3, **STANDARD), 2, DTYPES[dtype][0])
    got = run_forward(cupy, lib, x, table, STANDARD)
    d_x, d_t = cupy.asarray(x), cupy.asarray(table)
    for levels_per_block in (1, 4, 8):
        d_out = cupy.full(got.shape, 7, dtype=table.dtype)
        check(lib.metal_ops_hash_encode_forward_tuned(
            dptr(d_x), dptr(d_t), dptr(d_out), DTYPES[dtype][1], n, 3, 2, STANDARD["num_levels"],
            STANDARD["log2_hashmap_size"], STANDARD["base_resolution"], STANDARD["per_level_scale"],
            ref.INTERPOLATIONS["linear"], ref.OUT_OF_RANGE["clamp"], levels_per_block, stream_ptr(cupy)))
        np.testing.assert_array_equal(cupy.asnumpy(d_out), got, err_msg=f"levels_per_block={levels_per_block}")
    assert_close(got, ref.encode(x, table, **STANDARD), LOOSE, LOOSE, "encoded")

# ---- backward -----------------------------------------------------------------------------------

def _check_backward(gt, gi, x, dy, table, grid, interpolation, out_of_range, input_grad=True, loose=False):
    want_t, want_i = ref.encode_grads(x, table, dy, interpolation=interpolation, out_of_range=out_of_range, **grid)
    margin = ref.boundary_margin(x, out_of_range=out_of_range, **grid)
    if loose:
        assert_close(gt, want_t, LOOSE, LOOSE, "grad_table")
        if input_grad:
            check_input_grad(gi, want_i, margin, LOOSE, LOOSE, min_margin=3e-4)
        return
    if table.dtype == np.float32:
        assert_close(gt, want_t, 1e-4, 1e-5, "grad_table")
    else:  # float32 sums rounded once to half
        assert_close(gt, want_t.astype(np.float16).astype(np.float64), 2e-3, 1e-3, "grad_table")
    if input_grad:
        check_input_grad(gi, want_i, margin)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_backward_matches_reference(dims, features, dtype, interpolation, deterministic):
    cupy, lib = gpu()
    rng = np.random.default_rng(dims * 1000 + features * 10 + deterministic)
    grid = small_grid(dims)
    out_of_range = ("clamp", "wrap", "zero")[(dims + features) % 3]
    rows = ref.table_rows(dims, **grid)
    x = make_inputs(rng, 1000, dims, out_of_range_fraction=0.2, nan_rows=6)
    table = make_table(rng, rows, features, DTYPES[dtype][0])
    dy = rng.standard_normal((1000, 8 * features)).astype(table.dtype)
    gt, gi = run_backward(cupy, lib, dy, x, table, grid, interpolation, out_of_range, deterministic=deterministic)
    _check_backward(gt, gi, x, dy, table, grid, interpolation, out_of_range)
    assert np.all(gi[~np.isfinite(x).all(axis=1)] == 0)


@pytest.mark.parametrize("out_of_range", ["clamp", "wrap", "zero"])
@pytest.mark.parametrize("aggregate", [-1, 0, 200 * 1024])
def test_backward_out_of_range_and_aggregation(out_of_range, aggregate):
    cupy, lib = gpu()
    rng = np.random.default_rng(7)
    grid = small_grid(3)
    rows = ref.table_rows(3, **grid)
    x = make_inputs(rng, 20000, 3, out_of_range_fraction=0.3, nan_rows=6)
    table = make_table(rng, rows, 2, np.float32)
    dy = rng.standard_normal((20000, 16)).astype(np.float32)
    gt, gi = run_backward(cupy, lib, dy, x, table, grid, "linear", out_of_range, aggregate=aggregate)
    _check_backward(gt, gi, x, dy, table, grid, "linear", out_of_range)
    if out_of_range == "clamp":  # clamped coordinates carry no gradient
        outside = (x < 0) | (x > 1)
        assert np.all(gi[outside] == 0)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("n", [0, 1, 1000, 2 ** 17])
def test_backward_sizes_standard_scale(n, dtype):
    cupy, lib = gpu()
    rng = np.random.default_rng(n + 1)
    grid = dict(STANDARD, log2_hashmap_size=15)
    rows = ref.table_rows(3, **grid)
    x = make_inputs(rng, n, 3)
    table = make_table(rng, rows, 2, DTYPES[dtype][0])
    dy = rng.standard_normal((n, 32)).astype(table.dtype)
    for deterministic in (False, True):
        gt, gi = run_backward(cupy, lib, dy, x, table, grid, deterministic=deterministic)
        assert gt.shape == table.shape and gi.shape == (n, 3)
        _check_backward(gt, gi, x, dy, table, grid, "linear", "clamp", loose=True)


@pytest.mark.parametrize("input_grad,table_grad", [(False, True), (True, False)])
def test_backward_optional_outputs(input_grad, table_grad):
    cupy, lib = gpu()
    rng = np.random.default_rng(3)
    grid = small_grid(3)
    rows = ref.table_rows(3, **grid)
    x = make_inputs(rng, 5000, 3)
    table = make_table(rng, rows, 4, np.float32)
    dy = rng.standard_normal((5000, 32)).astype(np.float32)
    gt, gi = run_backward(cupy, lib, dy, x, table, grid, input_grad=input_grad, table_grad=table_grad)
    want_t, want_i = ref.encode_grads(x, table, dy, **grid)
    margin = ref.boundary_margin(x, **grid)
    if table_grad:
        assert_close(gt, want_t, 1e-4, 1e-5, "grad_table")
    else:
        assert np.all(gt == 7), "grad_table must be left alone when not requested"
    if input_grad:
        check_input_grad(gi, want_i, margin)
    else:
        assert np.all(gi == 7), "grad_inputs must be left alone when not requested"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_deterministic_backward_is_bitwise_reproducible(dtype):
    cupy, lib = gpu()
    rng = np.random.default_rng(11)
    n = 2 ** 17
    rows = ref.table_rows(3, **STANDARD)
    x = make_inputs(rng, n, 3)
    table = make_table(rng, rows, 2, DTYPES[dtype][0])
    # Clustered points (a few rays' worth) make many atomics collide.
    x[: n // 2] = (0.5 + 0.01 * rng.standard_normal((n // 2, 3))).astype(np.float32)
    dy = rng.standard_normal((n, 32)).astype(table.dtype)
    runs = [run_backward(cupy, lib, dy, x, table, STANDARD, deterministic=True) for _ in range(3)]
    for gt, gi in runs[1:]:
        assert np.array_equal(gt.view(np.uint16 if dtype == "float16" else np.uint32),
                              runs[0][0].view(np.uint16 if dtype == "float16" else np.uint32))
        assert np.array_equal(gi.view(np.uint32), runs[0][1].view(np.uint32))
    fast_t, fast_i = run_backward(cupy, lib, dy, x, table, STANDARD, deterministic=False)
    tol = 1e-4 if dtype == "float32" else 2e-3
    assert_close(runs[0][0], fast_t.astype(np.float64), tol, 1e-5, "deterministic vs atomic grad_table")
    assert_close(runs[0][1], fast_i.astype(np.float64), 1e-4, 1e-4, "deterministic vs atomic grad_inputs")


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("levels_per_block", [1, 2, 8, 32])
def test_level_grouping_does_not_change_results(levels_per_block, dtype):
    """The tuning knob (levels handled by one block) only moves work around."""
    cupy, lib = gpu()
    rng = np.random.default_rng(levels_per_block)
    grid = small_grid(3)
    rows = ref.table_rows(3, **grid)
    x = make_inputs(rng, 3000, 3, out_of_range_fraction=0.1, nan_rows=3)
    table = make_table(rng, rows, 2, DTYPES[dtype][0])
    code = DTYPES[dtype][1]
    d_x, d_t = cupy.asarray(x), cupy.asarray(table)
    d_out = cupy.full((3000, 16), 7, dtype=table.dtype)
    args = (3000, 3, 2, grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"],
            grid["per_level_scale"])
    check(lib.metal_ops_hash_encode_forward_tuned(dptr(d_x), dptr(d_t), dptr(d_out), code, *args, 1, 0,
                                                  levels_per_block, stream_ptr(cupy)))
    np.testing.assert_array_equal(cupy.asnumpy(d_out), run_forward(cupy, lib, x, table, grid, "smoothstep"))
    dy = rng.standard_normal((3000, 16)).astype(table.dtype)
    d_dy = cupy.asarray(dy)
    d_gt = cupy.full(table.shape, 7, dtype=table.dtype)
    d_gi = cupy.full((3000, 3), 7, dtype=cupy.float32)
    ws_bytes = 2 * table.size * 8 + 16 * 3000 * 3 * 4 + 4096  # enough for any grouping
    d_ws = cupy.empty(ws_bytes, dtype=cupy.uint8)
    for deterministic in (False, True):
        check(lib.metal_ops_hash_encode_backward_tuned(
            dptr(d_dy), dptr(d_x), dptr(d_t), dptr(d_gt), dptr(d_gi), dptr(d_ws), ws_bytes, code, *args, 0, 1, 1, 1,
            int(deterministic), -1, levels_per_block, stream_ptr(cupy)))
        cupy.cuda.get_current_stream().synchronize()
        _check_backward(cupy.asnumpy(d_gt), cupy.asnumpy(d_gi), x, dy, table, grid, "linear", "wrap")


# ---- second order (MetalOpsHashEncodeGradGrad) ----------------------------------------------------

def run_grad_grad(cupy, lib, gg, dy, x, table, grid, interpolation="linear", out_of_range="clamp", *,
                  deterministic=False):
    """(grad_table, grad_grad_encoded) of the CUDA launcher; outputs start as a
    sentinel (7) that must be overwritten everywhere."""
    n, dims = x.shape
    features = table.shape[1]
    dtype, code = DTYPES[np.dtype(table.dtype).name]
    args = (code, n, dims, features, grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"],
            grid["per_level_scale"])
    ws_bytes = lib.metal_ops_hash_encode_grad_grad_workspace_bytes(*args, int(deterministic))
    assert ws_bytes >= 0
    d_ws = cupy.empty(max(ws_bytes, 1), dtype=cupy.uint8)
    d_gg, d_dy, d_x, d_t = cupy.asarray(gg), cupy.asarray(dy), cupy.asarray(x), cupy.asarray(table)
    d_gt = cupy.full(table.shape, 7, dtype=dtype)
    d_gdy = cupy.full(dy.shape, 7, dtype=dtype)
    check(lib.metal_ops_hash_encode_grad_grad(
        dptr(d_gg), dptr(d_dy), dptr(d_x), dptr(d_t), dptr(d_gt), dptr(d_gdy), dptr(d_ws), ws_bytes, *args,
        ref.INTERPOLATIONS[interpolation], ref.OUT_OF_RANGE[out_of_range], int(deterministic), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_gt), cupy.asnumpy(d_gdy)


def second_order_case(rng, n, dims, features, dtype, grid, out_of_range, min_margin=1e-5):
    """x (out-of-range and NaN / inf rows), table, grad_encoded and
    grad_grad_inputs; grad_grad_inputs is zero for the few points within
    rounding of a cell boundary, where the reference's cell may differ."""
    x = make_inputs(rng, n, dims, out_of_range_fraction=0.2, nan_rows=6)
    table = make_table(rng, ref.table_rows(dims, **grid), features, dtype)
    dy = rng.standard_normal((n, grid["num_levels"] * features)).astype(dtype)
    # Scaled so that half sums stay far from float16's range (fine levels'
    # coefficients carry the level scale, up to 383 here).
    gg = (rng.standard_normal((n, dims)) / 64).astype(np.float32)
    near = ref.boundary_margin(x, out_of_range=out_of_range, **grid) <= min_margin
    assert near.mean() <= 0.1, f"{near.mean():.3f} of points near cell boundaries"
    gg[near] = 0.0
    return x, table, dy, gg


def check_second_order(gt, gdy, x, table, dy, gg, grid, interpolation, out_of_range, loose=False):
    want_t, want_dy = ref.encode_second_order(x, table, dy, gg, interpolation=interpolation,
                                              out_of_range=out_of_range, **grid)
    assert gt.dtype == table.dtype and gt.shape == table.shape
    assert gdy.dtype == table.dtype and gdy.shape == dy.shape
    if loose:
        assert_close(gt, want_t, LOOSE, LOOSE, "grad_table")
        assert_close(gdy, want_dy, LOOSE, LOOSE, "grad_grad_encoded")
    elif table.dtype == np.float32:
        assert_close(gt, want_t, 1e-4, 1e-5, "grad_table")
        assert_close(gdy, want_dy, 1e-4, 1e-5, "grad_grad_encoded")
    else:  # float32 sums rounded once to half
        assert_close(gt, want_t.astype(np.float16).astype(np.float64), 2e-3, 1e-3, "grad_table")
        assert_close(gdy, want_dy.astype(np.float16).astype(np.float64), 2e-3, 1e-3, "grad_grad_encoded")
    assert np.all(gdy[~np.isfinite(x).all(axis=1)] == 0), "NaN / inf points must have zero grad_grad_encoded"


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("out_of_range", ["clamp", "wrap", "zero"])
def test_grad_grad_matches_reference(dims, features, dtype, interpolation, out_of_range, deterministic):
    cupy, lib = gpu()
    rng = np.random.default_rng(dims * 1000 + features * 10 + deterministic)
    grid = small_grid(dims)
    x, table, dy, gg = second_order_case(rng, 1000, dims, features, DTYPES[dtype][0], grid, out_of_range)
    gt, gdy = run_grad_grad(cupy, lib, gg, dy, x, table, grid, interpolation, out_of_range,
                            deterministic=deterministic)
    check_second_order(gt, gdy, x, table, dy, gg, grid, interpolation, out_of_range)
    assert np.abs(gt).max() > 0 and np.abs(gdy).max() > 0


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("grid", [dict(small_grid(3), num_levels=1), dict(small_grid(3), num_levels=3),
                                  dict(STANDARD, log2_hashmap_size=15)], ids=["L1", "L3", "L16"])
def test_grad_grad_level_counts(grid, dtype):
    cupy, lib = gpu()
    rng = np.random.default_rng(grid["num_levels"])
    loose = grid["num_levels"] == 16  # level scales that are not exact floats (LOOSE)
    x, table, dy, gg = second_order_case(rng, 3000, 3, 2, DTYPES[dtype][0], grid, "clamp",
                                         min_margin=3e-4 if loose else 1e-5)
    for deterministic in (False, True):
        gt, gdy = run_grad_grad(cupy, lib, gg, dy, x, table, grid, deterministic=deterministic)
        check_second_order(gt, gdy, x, table, dy, gg, grid, "linear", "clamp", loose=loose)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_grad_grad_empty_input(dtype, deterministic):
    """N = 0: grad_table is all zeros (the sentinel overwritten), grad_grad_encoded empty."""
    cupy, lib = gpu()
    grid = small_grid(3)
    table = make_table(np.random.default_rng(0), ref.table_rows(3, **grid), 2, DTYPES[dtype][0])
    gt, gdy = run_grad_grad(cupy, lib, np.zeros((0, 3), np.float32), np.zeros((0, 16), table.dtype),
                            np.zeros((0, 3), np.float32), table, grid, deterministic=deterministic)
    assert gt.shape == table.shape and np.all(gt == 0)
    assert gdy.shape == (0, 16)


def test_grad_grad_masked_nan_stays_out():
    """A NaN grad_grad_inputs entry along a clamped coordinate (no gradient
    there) changes nothing, as on the CPU."""
    cupy, lib = gpu()
    rng = np.random.default_rng(5)
    grid = small_grid(3)
    x, table, dy, gg = second_order_case(rng, 2000, 3, 2, np.float32, grid, "clamp")
    clamped = np.isfinite(x) & ((x < 0) | (x > 1))
    assert clamped.any()
    gg_nan = np.where(clamped, np.float32(np.nan), gg)
    gg_zero = np.where(clamped, np.float32(0.0), gg)
    for deterministic in (False, True):
        gt, gdy = run_grad_grad(cupy, lib, gg_nan, dy, x, table, grid, deterministic=deterministic)
        assert np.all(np.isfinite(gt)) and np.all(np.isfinite(gdy))
        check_second_order(gt, gdy, x, table, dy, gg_zero, grid, "linear", "clamp")


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_deterministic_grad_grad_is_bitwise_reproducible(dtype):
    cupy, lib = gpu()
    rng = np.random.default_rng(13)
    n = 2 ** 16
    x = make_inputs(rng, n, 3)
    # Clustered points make many atomics collide.
    x[: n // 2] = (0.5 + 0.01 * rng.standard_normal((n // 2, 3))).astype(np.float32)
    table = make_table(rng, ref.table_rows(3, **STANDARD), 2, DTYPES[dtype][0])
    dy = rng.standard_normal((n, 32)).astype(table.dtype)
    gg = rng.standard_normal((n, 3)).astype(np.float32)
    runs = [run_grad_grad(cupy, lib, gg, dy, x, table, STANDARD, deterministic=True) for _ in range(3)]
    bits = np.uint16 if dtype == "float16" else np.uint32
    for gt, gdy in runs[1:]:
        assert np.array_equal(gt.view(bits), runs[0][0].view(bits))
        assert np.array_equal(gdy.view(bits), runs[0][1].view(bits))
    fast_t, fast_dy = run_grad_grad(cupy, lib, gg, dy, x, table, STANDARD, deterministic=False)
    tol = 1e-4 if dtype == "float32" else 2e-3
    assert_close(runs[0][0], fast_t.astype(np.float64), tol, 1e-5, "deterministic vs atomic grad_table")
    assert np.array_equal(runs[0][1].view(bits), fast_dy.view(bits)), "grad_grad_encoded has no atomics"


def test_grad_grad_bad_arguments_return_errors():
    cupy, lib = gpu()
    grid = small_grid(3)
    rows = ref.table_rows(3, **grid)
    args = (0, 4, 3, 3, grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"],
            grid["per_level_scale"])  # F = 3 is unsupported
    x, gg = cupy.zeros((4, 3), dtype=cupy.float32), cupy.zeros((4, 3), dtype=cupy.float32)
    t, gt = cupy.zeros((rows, 3), dtype=cupy.float32), cupy.zeros((rows, 3), dtype=cupy.float32)
    dy, gdy = cupy.zeros((4, 24), dtype=cupy.float32), cupy.zeros((4, 24), dtype=cupy.float32)
    ws = cupy.empty(1 << 20, dtype=cupy.uint8)
    err = lib.metal_ops_hash_encode_grad_grad(dptr(gg), dptr(dy), dptr(x), dptr(t), dptr(gt), dptr(gdy), dptr(ws),
                                              1 << 20, *args, 0, 0, 0, stream_ptr(cupy))
    assert err != 0
    # A deterministic launch without its workspace is refused.
    t2, gt2 = cupy.zeros((rows, 2), dtype=cupy.float32), cupy.zeros((rows, 2), dtype=cupy.float32)
    dy2, gdy2 = cupy.zeros((4, 16), dtype=cupy.float32), cupy.zeros((4, 16), dtype=cupy.float32)
    need = lib.metal_ops_hash_encode_grad_grad_workspace_bytes(0, 4, 3, 2, *args[4:], 1)
    assert need > 0
    err = lib.metal_ops_hash_encode_grad_grad(dptr(gg), dptr(dy2), dptr(x), dptr(t2), dptr(gt2), dptr(gdy2),
                                              dptr(ws), need - 1, 0, 4, 3, 2, *args[4:], 0, 0, 1, stream_ptr(cupy))
    assert err != 0
