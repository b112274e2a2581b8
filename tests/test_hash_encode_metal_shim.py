"""HashEncode Metal shaders, run on the CPU through the MSL shim, vs NumPy.

kernels/hash_encode/hash_encode.metal is compiled as C++ (tests/metal_shim/msl_shim.h)
into build/libmetal_shim.so by `make metal-shim` (part of `make test`);
tests/metal_shim/hash_encode_shim.cc runs each shader over its dispatch grid
in the order kernels/hash_encode/hash_encode_metal.cc encodes them. The reference
is tests/reference/hash_encode.py (independent, from the formulas). This
checks the shaders' arithmetic and indexing, not Metal's memory model or the
host path (tests/test_metal_plans.py runs that on the strict model).
"""
import ctypes

import numpy as np
import pytest

from tests.reference import hash_encode as ref
from tests.metal_shim.shim import load_shim, ptr

pytestmark = pytest.mark.source_tree("the Metal shaders (MSL shim)")

DTYPES = {"float32": (np.float32, 0), "float16": (np.float16, 1)}


def small_grid(dims):
    # Power-of-two level scale: exact level scales, so cells agree bit for bit.
    return dict(num_levels=8, log2_hashmap_size=2 * dims + 6, base_resolution=3, per_level_scale=2.0)


@pytest.fixture(scope="module")
def shim():
    lib = load_shim()
    i32, i64, u32, f32, vp = ctypes.c_int, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float, ctypes.c_void_p
    lib.shim_hash_encode_table_rows.argtypes = [i32, i32, i32, u32, f32]
    lib.shim_hash_encode_table_rows.restype = i64
    lib.shim_hash_encode_forward.argtypes = [i32, vp, vp, vp, i64, i32, i32, i32, i32, u32, f32, i32, i32, u32]
    lib.shim_hash_encode_forward.restype = i32
    lib.shim_hash_encode_backward.argtypes = [i32, vp, vp, vp, vp, vp, i32, i32, i32, vp, i64, i32, i32, i32, i32,
                                              u32, f32, i32, i32, u32]
    lib.shim_hash_encode_backward.restype = i32
    lib.shim_hash_grid_levels.argtypes = [i32, i32, i32, u32, f32, vp, vp, vp]
    lib.shim_hash_grid_levels.restype = None
    lib.shim_hash_encode_override_level_scale.argtypes = [i32, f32]
    lib.shim_hash_encode_override_level_scale.restype = None
    lib.shim_hash_encode_find_every_kernel.argtypes = []
    lib.shim_hash_encode_find_every_kernel.restype = i32
    return lib


def test_every_instantiated_shader_is_found_by_its_host_name(shim):
    """The shim finds the shaders by the names hash_encode_metal.cc builds; each
    of those names is instantiated and every instantiation is one of them."""
    assert shim.shim_hash_encode_find_every_kernel() == 0


def make_inputs(rng, n, dims):
    x = rng.random((n, dims), dtype=np.float32)
    if n >= 12:
        x[0], x[1] = 0.0, 1.0
        x[2:8] = rng.uniform(-0.4, 1.4, size=(6, dims)).astype(np.float32)  # out of range
        x[8, 0], x[9, dims - 1], x[10, 0] = np.nan, np.inf, -np.inf
    return np.ascontiguousarray(x)


def forward(shim, x, table, grid, interpolation, out_of_range, max_grid=1 << 30):
    n, dims = x.shape
    features = table.shape[1]
    out = np.full((n, grid["num_levels"] * features), 7, dtype=table.dtype)
    err = shim.shim_hash_encode_forward(
        DTYPES[table.dtype.name][1], ptr(x), ptr(table), ptr(out), n, dims, features, grid["num_levels"],
        grid["log2_hashmap_size"], grid["base_resolution"], grid["per_level_scale"],
        ref.INTERPOLATIONS[interpolation], ref.OUT_OF_RANGE[out_of_range], max_grid)
    assert err == 0
    return out


def backward(shim, dy, x, table, grid, interpolation, out_of_range, deterministic, max_grid=1 << 30,
             table_grad=True, input_grad=True):
    n, dims = x.shape
    features = table.shape[1]
    grad_table = np.full(table.shape, 7, dtype=table.dtype)
    grad_inputs = np.full((n, dims), 7, dtype=np.float32)
    workspace = np.zeros(2 * table.size + 1, dtype=np.uint32)
    err = shim.shim_hash_encode_backward(
        DTYPES[table.dtype.name][1], ptr(dy), ptr(x), ptr(table), ptr(grad_table), ptr(grad_inputs),
        int(table_grad), int(input_grad), int(deterministic), ptr(workspace), n, dims, features,
        grid["num_levels"], grid["log2_hashmap_size"], grid["base_resolution"], grid["per_level_scale"],
        ref.INTERPOLATIONS[interpolation], ref.OUT_OF_RANGE[out_of_range], max_grid)
    assert err == 0
    return grad_table, grad_inputs


def close(actual, expected, rtol, atol_fraction, what):
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol_fraction * scale,
                               err_msg=what)


@pytest.mark.parametrize("dims", [1, 2, 3, 4])
def test_table_rows(shim, dims):
    for grid in (small_grid(dims), dict(num_levels=16, log2_hashmap_size=19, base_resolution=16,
                                        per_level_scale=float(np.exp(np.log(128) / 15)))):
        assert shim.shim_hash_encode_table_rows(dims, *grid.values()) == ref.table_rows(dims, **grid)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("features", [1, 2, 4, 8])
@pytest.mark.parametrize("dims", [1, 2, 3, 4])
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_forward_matches_reference(shim, dims, features, dtype, interpolation):
    rng = np.random.default_rng(dims * 10 + features)
    grid = small_grid(dims)
    out_of_range = ("clamp", "wrap", "zero")[(dims + features) % 3]
    table = rng.uniform(-1, 1, (ref.table_rows(dims, **grid), features)).astype(DTYPES[dtype][0])
    x = make_inputs(rng, 300, dims)
    got = forward(shim, x, table, grid, interpolation, out_of_range)
    want = ref.encode(x, table, interpolation=interpolation, out_of_range=out_of_range, **grid)
    if dtype == "float32":
        close(got, want, 1e-5, 2e-6, "encoded")
    else:
        close(got, want.astype(np.float16).astype(np.float64), 1e-3, 1e-3, "encoded")
    assert np.all(got[8:11] == 0), "NaN / inf points encode to zero"


@pytest.mark.parametrize("out_of_range", ["clamp", "wrap", "zero"])
def test_forward_grid_stride_and_empty(shim, out_of_range):
    rng = np.random.default_rng(1)
    grid = small_grid(3)
    table = rng.uniform(-1, 1, (ref.table_rows(3, **grid), 2)).astype(np.float32)
    x = make_inputs(rng, 257, 3)
    wide = forward(shim, x, table, grid, "linear", out_of_range)
    narrow = forward(shim, x, table, grid, "linear", out_of_range, max_grid=37)  # each thread loops
    np.testing.assert_array_equal(wide, narrow)
    empty = forward(shim, np.zeros((0, 3), np.float32), table, grid, "linear", out_of_range)
    assert empty.shape == (0, 16)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("features", [1, 2, 4, 8])
@pytest.mark.parametrize("dims", [1, 2, 3, 4])
def test_backward_matches_reference(shim, dims, features, dtype, deterministic):
    rng = np.random.default_rng(dims * 100 + features)
    grid = small_grid(dims)
    interpolation = ("linear", "smoothstep")[features % 3 % 2]
    out_of_range = ("clamp", "wrap", "zero")[(dims + features + deterministic) % 3]
    table = rng.uniform(-1, 1, (ref.table_rows(dims, **grid), features)).astype(DTYPES[dtype][0])
    x = make_inputs(rng, 300, dims)
    dy = rng.standard_normal((300, 8 * features)).astype(table.dtype)
    gt, gi = backward(shim, dy, x, table, grid, interpolation, out_of_range, deterministic, max_grid=1000)
    want_t, want_i = ref.encode_grads(x, table, dy, interpolation=interpolation, out_of_range=out_of_range, **grid)
    margin = ref.boundary_margin(x, out_of_range=out_of_range, **grid)
    if dtype == "float32":
        close(gt, want_t, 1e-5, 1e-6, "grad_table")
    else:
        close(gt, want_t.astype(np.float16).astype(np.float64), 2e-3, 1e-3, "grad_table")
    safe = margin > 1e-5
    assert safe.mean() > 0.9
    close(gi[safe], want_i[safe], 2e-4, 1e-4, "grad_inputs")
    assert np.all(gi[8:11] == 0), "NaN / inf points have zero input gradient"
    if out_of_range == "clamp":
        assert np.all(gi[(x < 0) | (x > 1)] == 0), "clamped coordinates carry no gradient"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_deterministic_matches_atomic_path_and_handles_large_dy(shim, dtype):
    rng = np.random.default_rng(4)
    grid = small_grid(3)
    table = rng.uniform(-1, 1, (ref.table_rows(3, **grid), 2)).astype(DTYPES[dtype][0])
    x = make_inputs(rng, 2000, 3)
    # Large and tiny gradients together: the fixed-point scale comes from max|dy| * N.
    dy = (rng.standard_normal((2000, 16)) * np.where(rng.random((2000, 16)) < 0.5, 1e3, 1e-3)).astype(table.dtype)
    fixed_t, fixed_i = backward(shim, dy, x, table, grid, "linear", "clamp", True)
    float_t, float_i = backward(shim, dy, x, table, grid, "linear", "clamp", False)
    want_t, _ = ref.encode_grads(x, table, dy, **grid)
    tol = 1e-5 if dtype == "float32" else 2e-3
    close(fixed_t, want_t if dtype == "float32" else want_t.astype(np.float16).astype(np.float64), tol, 1e-6,
          "deterministic grad_table")
    close(float_t, fixed_t.astype(np.float64), tol, 1e-6, "atomic vs deterministic grad_table")
    np.testing.assert_array_equal(fixed_i, float_i)  # the input gradient has no atomics in either path


def test_backward_optional_outputs_and_empty(shim):
    rng = np.random.default_rng(2)
    grid = small_grid(2)
    table = rng.uniform(-1, 1, (ref.table_rows(2, **grid), 4)).astype(np.float32)
    x = make_inputs(rng, 100, 2)
    dy = rng.standard_normal((100, 32)).astype(np.float32)
    gt, gi = backward(shim, dy, x, table, grid, "linear", "clamp", False, input_grad=False)
    assert np.all(gi == 7), "grad_inputs untouched when not requested"
    close(gt, ref.encode_grads(x, table, dy, **grid)[0], 1e-5, 1e-6, "grad_table")
    gt, gi = backward(shim, dy, x, table, grid, "linear", "clamp", False, table_grad=False)
    assert np.all(gt == 7), "grad_table untouched when not requested"
    gt, gi = backward(shim, np.zeros((0, 32), np.float32), np.zeros((0, 2), np.float32), table, grid, "linear",
                      "clamp", True)
    assert np.all(gt == 0) and gi.shape == (0, 2)


def grid_levels(shim, dims, grid):
    count = grid["num_levels"]
    scale = np.zeros(count, np.float32)
    resolution = np.zeros(count, np.uint32)
    hashed = np.zeros(count, np.uint32)
    shim.shim_hash_grid_levels(dims, count, grid["log2_hashmap_size"], grid["base_resolution"],
                               grid["per_level_scale"], ptr(scale), ptr(resolution), ptr(hashed))
    return scale, resolution, hashed


@pytest.mark.parametrize("dims", [1, 2, 3, 4])
def test_level_table_pins_base_16_scale_1_5(shim, dims):
    """hash_grid::make_params' per-level table (the one every backend's kernels
    read): levels 1-4 of base 16, scale 1.5 are within 2e-7 of an integer before
    the ceiling; computed once on the host they are 24/36/54/81."""
    grid = dict(num_levels=16, log2_hashmap_size=19, base_resolution=16, per_level_scale=1.5)
    scale, resolution, hashed = grid_levels(shim, dims, grid)
    assert list(resolution[:5]) == [16, 24, 36, 54, 81]
    expected = ref.levels(dims, **grid)
    assert list(resolution) == [lv.resolution for lv in expected]
    np.testing.assert_array_equal(scale, [lv.scale for lv in expected])
    assert list(hashed.astype(bool)) == [lv.hashed for lv in expected]


def test_shaders_read_the_hosts_level_table(shim):
    """Changing one level's scale in Params changes that level's features only:
    the shader reads the table and computes no level geometry of its own."""
    rng = np.random.default_rng(5)
    grid = dict(num_levels=4, log2_hashmap_size=12, base_resolution=16, per_level_scale=1.5)
    table = rng.uniform(-1, 1, (ref.table_rows(3, **grid), 2)).astype(np.float32)
    x = make_inputs(rng, 64, 3)
    base = forward(shim, x, table, grid, "linear", "clamp")
    try:
        shim.shim_hash_encode_override_level_scale(2, 17.0)
        changed = forward(shim, x, table, grid, "linear", "clamp")
    finally:
        shim.shim_hash_encode_override_level_scale(-1, 0.0)
    level = lambda a, l: a[:, 2 * l:2 * l + 2]  # noqa: E731
    for l in (0, 1, 3):
        np.testing.assert_array_equal(level(changed, l), level(base, l))
    assert not np.array_equal(level(changed, 2), level(base, 2))


def test_no_backend_computes_level_geometry():
    """Only kernels/common/hash_grid.h computes a level's scale and resolution
    (level_geometry); the CPU, CUDA and Metal kernels read Params' table."""
    import glob
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # The op's folder, its header less the grid's check (Grid, which checks
    # the finest level's size): its CPU, CUDA, Metal and XLA files.
    files = glob.glob(os.path.join(root, "kernels", "hash_encode", "hash_encode*"))
    assert len(files) >= 6
    for path in files:
        text = open(path).read()
        if path.endswith("hash_encode.h"):
            check = text.index("Result Grid(const A& a) {")
            text = text[:check] + text[text.index("\n}\n", check):]
        assert not re.search(r"\b(level_scale|level_resolution|level_geometry|exp2_f|exp2f?)\s*\(", text), path
