"""RayMarch: the CPU kernel against the float64 reference of its specification
(tests/reference/ray_march.py) on hand-built grids and rays and on random
ones, the packing helper, determinism, empty batches and bad inputs."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.ray_march import pack_occupancy
from tests.reference.ray_march import UNIT, grid_bits, random_case, reference, unpack

pytestmark = pytest.mark.every_device

def march(origins, directions, near, far, occupancy, **kw):
    out = metal_ops.ray_march(np.asarray(origins, np.float32), np.asarray(directions, np.float32),
                              np.asarray(near, np.float32), np.asarray(far, np.float32), occupancy, **kw)
    return [v.numpy() for v in out]


def assert_same_samples(got, want, atol=1e-5):
    ts, te, ri, off, cnt = got
    ws, we, wri, woff, wcnt = want
    np.testing.assert_array_equal(cnt, wcnt)
    np.testing.assert_array_equal(off, woff)
    np.testing.assert_array_equal(ri, wri)
    np.testing.assert_allclose(ts, ws, rtol=1e-5, atol=atol)
    np.testing.assert_allclose(te, we, rtol=1e-5, atol=atol)


def assert_one_ray(got, starts, ends):
    """march()'s output for one ray: its samples' intervals [starts, ends)."""
    ts, te, _, _, cnt = got
    np.testing.assert_array_equal(cnt, [len(starts)])
    np.testing.assert_allclose(ts, starts, atol=1e-6)
    np.testing.assert_allclose(te, ends, atol=1e-6)


# ---- hand-built cases -------------------------------------------------------------------
def test_full_grid_axis_ray_gives_uniform_steps():
    # Along +x at y = z = 0.3 from x = -1: enters the unit box at t = 1, leaves
    # at t = 2 (steps of 1/8 are exact in float32).
    g = 4
    bits = grid_bits(np.ones((1, g, g, g)), g)
    ts, te, ri, off, cnt = march([[-1.0, 0.3, 0.3]], [[1.0, 0.0, 0.0]], [0.0], [10.0], bits, aabb=UNIT,
                                 grid_resolution=g, step_size=0.125)
    np.testing.assert_array_equal(cnt, [8])
    np.testing.assert_array_equal(ts, 1.0 + 0.125 * np.arange(8))
    np.testing.assert_array_equal(te, 1.125 + 0.125 * np.arange(8))
    np.testing.assert_array_equal(ri, np.zeros(8))
    np.testing.assert_array_equal(off, [0])


def test_one_occupied_cell_along_x():
    # Only cell x = 2 (of 4, x in [0.5, 0.75)) on the ray's row is occupied:
    # the steps at midpoints x = 0.04 and 0.29 find cells 0 and 1 empty and
    # jump to their ends, x = 0.25 then 0.5 (t = 1.5); then [1.5, 1.58],
    # [1.58, 1.66], [1.66, 1.74] are kept and the step at midpoint 0.78
    # (cell 3, empty) jumps to the box's end.
    g = 4
    bits = grid_bits([(0, 1, 1, 2)], g)
    got = march([[-1.0, 0.3, 0.3]], [[1.0, 0.0, 0.0]], [0.0], [10.0], bits, aabb=UNIT, grid_resolution=g,
                step_size=0.08)
    assert_one_ray(got, [1.5, 1.58, 1.66], [1.58, 1.66, 1.74])


def test_far_cuts_the_last_step():
    g = 2
    bits = grid_bits(np.ones((1, g, g, g)), g)
    got = march([[0.5, 0.5, -1.0]], [[0.0, 0.0, 1.0]], [1.1], [1.35], bits, aabb=UNIT, grid_resolution=g,
                step_size=0.1)
    assert_one_ray(got, [1.1, 1.2, 1.3], [1.2, 1.3, 1.35])


def test_rays_missing_parallel_outside_and_inverted_bounds_get_nothing():
    g = 4
    bits = grid_bits(np.ones((1, g, g, g)), g)
    origins = [[-1.0, 2.0, 0.5],   # misses (y outside, moving along x)
               [-1.0, -1.0, -1.0],  # points away
               [0.5, 0.5, 0.5],     # near > far
               [0.5, 0.5, 5.0]]     # parallel to z, outside the box, moving away
    dirs = [[1.0, 0.0, 0.0], [-1.0, -1.0, -1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    ts, _, _, off, cnt = march(origins, dirs, [0.0, 0.0, 3.0, 0.0], [10.0, 10.0, 1.0, 10.0], bits, aabb=UNIT,
                               grid_resolution=g, step_size=0.05)
    np.testing.assert_array_equal(cnt, [0, 0, 0, 0])
    np.testing.assert_array_equal(off, [0, 0, 0, 0])
    assert ts.shape == (0,)


def test_ray_starting_inside_the_box_starts_at_near():
    g = 4
    bits = grid_bits(np.ones((1, g, g, g)), g)
    ts, te, _, _, cnt = march([[0.5, 0.5, 0.5]], [[0.0, 1.0, 0.0]], [0.05], [10.0], bits, aabb=UNIT,
                              grid_resolution=g, step_size=0.1)
    np.testing.assert_allclose(ts[0], 0.05, atol=1e-7)
    assert cnt[0] == 5 and abs(te[-1] - 0.5) < 1e-6  # leaves the box at t = 0.5


def test_empty_grid_and_full_grid_against_reference():
    g = 8
    rng = np.random.default_rng(3)
    origins = rng.uniform(-2, 3, (64, 3)).astype(np.float32)
    dirs = rng.normal(size=(64, 3)).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    near, far = np.zeros(64, np.float32), np.full(64, 10.0, np.float32)
    for occ in (np.zeros((1, g, g, g)), np.ones((1, g, g, g))):
        bits = grid_bits(occ, g)
        kw = dict(aabb=UNIT, grid_resolution=g, step_size=0.037)
        got = march(origins, dirs, near, far, bits, **kw)
        assert_same_samples(got, reference(origins, dirs, near, far, bits, **kw))
        if not occ.any():
            assert got[0].shape == (0,)


# ---- random grids, cascades, cone stepping --------------------------------------------
@pytest.mark.parametrize("g,cascades,fill", [(4, 1, 0.5), (16, 1, 0.2), (8, 2, 0.3), (5, 3, 0.6), (32, 1, 0.05)])
@pytest.mark.parametrize("cone_angle,max_samples", [(0.0, 1024), (0.02, 1024), (0.0, 7)])
def test_random_against_reference(g, cascades, fill, cone_angle, max_samples):
    origins, dirs, near, far, bits = random_case(g * 100 + cascades, 97, g, cascades, fill)
    kw = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.0123, cone_angle=cone_angle,
              max_step_size=0.2, max_samples=max_samples)
    got = march(origins, dirs, near, far, bits, **kw)
    assert_same_samples(got, reference(origins, dirs, near, far, bits, **kw))
    ts, te, ri, off, cnt = got
    assert np.all(cnt <= max_samples)
    assert np.all(te > ts) and np.all(np.diff(ri) >= 0)
    # within each ray, samples are ordered and do not overlap
    same = ri[1:] == ri[:-1]
    assert np.all(ts[1:][same] >= te[:-1][same] - 1e-6)
    assert np.all(ts >= near[ri] - 1e-6) and np.all(te <= far[ri] + 1e-6)


def test_cascades_cover_a_larger_box():
    # One cascade of [0,1]^3 vs two: the second reaches [-0.5, 1.5]^3.
    g = 4
    origins, dirs = [[-3.0, 0.5, 0.5]], [[1.0, 0.0, 0.0]]
    one = march(origins, dirs, [0.0], [10.0], grid_bits(np.ones((1, g, g, g)), g), aabb=UNIT, grid_resolution=g,
                step_size=0.25)
    two = march(origins, dirs, [0.0], [10.0], grid_bits(np.ones((2, g, g, g)), g), aabb=UNIT, grid_resolution=g,
                step_size=0.25)
    np.testing.assert_allclose(one[0], [3.0, 3.25, 3.5, 3.75], atol=1e-6)
    np.testing.assert_allclose(two[0], 2.5 + 0.25 * np.arange(8), atol=1e-6)


def test_cone_stepping_grows_with_distance():
    g = 4
    bits = grid_bits(np.ones((1, g, g, g)), g)
    ts, te, *_ = march([[0.5, 0.5, -20.0]], [[0.0, 0.0, 1.0]], [0.0], [100.0], bits, aabb=[0, 0, -20, 1, 1, 20],
                       grid_resolution=g, step_size=0.01, cone_angle=0.1, max_step_size=1.5)
    dt = te - ts
    np.testing.assert_allclose(dt[:5], np.maximum(0.01, 0.1 * ts[:5]).clip(max=1.5), rtol=1e-5)
    assert dt.max() <= 1.5 + 1e-5 and dt[-2] == pytest.approx(1.5, rel=1e-5)


# ---- jitter, determinism ---------------------------------------------------------------
def test_jitter_is_deterministic_per_seed_and_matches_reference():
    origins, dirs, near, far, bits = random_case(7, 50, 8, 1, 0.4)
    kw = dict(aabb=UNIT, grid_resolution=8, step_size=0.05, jitter=True)
    a = march(origins, dirs, near, far, bits, seed=11, **kw)
    b = march(origins, dirs, near, far, bits, seed=11, **kw)
    c = march(origins, dirs, near, far, bits, seed=12, **kw)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[0].shape != c[0].shape or not np.array_equal(a[0], c[0])
    assert_same_samples(a, reference(origins, dirs, near, far, bits, seed=11, **kw))


def test_repeated_runs_are_bitwise_identical():
    origins, dirs, near, far, bits = random_case(9, 2000, 16, 2, 0.3)
    kw = dict(aabb=UNIT, grid_resolution=16, step_size=0.01, cone_angle=0.01)
    first = march(origins, dirs, near, far, bits, **kw)
    for _ in range(3):
        for x, y in zip(first, march(origins, dirs, near, far, bits, **kw)):
            np.testing.assert_array_equal(x, y)


# ---- packing, graph mode, shapes -------------------------------------------------------
@pytest.mark.parametrize("g,cascades", [(1, 1), (3, 2), (8, 1), (5, 4)])
def test_pack_occupancy_matches_numpy_packbits(g, cascades):
    occ = np.random.default_rng(g).uniform(size=(cascades, g, g, g)) < 0.5
    want = np.packbits(occ.reshape(cascades, -1), axis=1, bitorder="little")
    np.testing.assert_array_equal(pack_occupancy(occ).numpy(), want)
    np.testing.assert_array_equal(pack_occupancy(occ.reshape(cascades, -1).astype(np.float32)).numpy(), want)
    np.testing.assert_array_equal(unpack(want, g), occ)


def test_tf_function_with_seed_tensor():
    origins, dirs, near, far, bits = random_case(5, 40, 8, 1, 0.5)
    kw = dict(aabb=UNIT, grid_resolution=8, step_size=0.05, jitter=True)

    @tf.function
    def f(seed):
        return metal_ops.ray_march(origins, dirs, near, far, bits, seed=seed, **kw)

    for seed in (1, 2):
        got = [v.numpy() for v in f(tf.constant(seed))]
        assert_same_samples(got, reference(origins, dirs, near, far, bits, seed=seed, **kw))
    assert f.experimental_get_tracing_count() == 1  # a new seed needs no new trace


def test_static_shapes():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)] * 2 + [tf.TensorSpec([None], tf.float32)] * 2
                 + [tf.TensorSpec([1, 8], tf.uint8)])
    def f(o, d, n, fa, occ):
        out = metal_ops.ray_march(o, d, n, fa, occ, aabb=UNIT, grid_resolution=4, step_size=0.1)
        assert out.t_starts.shape.as_list() == [None] and out.ray_counts.shape.as_list() == [None]
        return out

    f.get_concrete_function()


def test_empty_batch():
    bits = grid_bits(np.ones((1, 4, 4, 4)), 4)
    out = march(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0), np.zeros(0), bits, aabb=UNIT, grid_resolution=4,
                step_size=0.1)
    assert [v.shape for v in out] == [(0,), (0,), (0,), (0,), (0,)]


def test_nan_and_inf_inputs_give_no_samples():
    bits = grid_bits(np.ones((1, 4, 4, 4)), 4)
    origins = [[np.nan, 0.5, 0.5], [-1.0, 0.5, 0.5], [-1.0, 0.5, 0.5], [-1.0, 0.5, 0.5]]
    dirs = [[1.0, 0.0, 0.0], [np.nan, 0.0, 0.0], [1.0, 0.0, 0.0], [np.inf, 0.0, 0.0]]
    _, _, _, _, cnt = march(origins, dirs, [0.0, 0.0, np.nan, 0.0], [10.0, 10.0, 10.0, 10.0], bits, aabb=UNIT,
                            grid_resolution=4, step_size=0.1)
    np.testing.assert_array_equal(cnt, [0, 0, 0, 0])


def test_huge_t_makes_no_endless_loop():
    # At t ~ 1e8 a step of 1e-3 does not change t in float32: the march stops.
    bits = grid_bits(np.ones((1, 4, 4, 4)), 4)
    big = [0, 0, 0, 1e9, 1e9, 1e9]
    _, _, _, _, cnt = march([[-1e8, 5e8, 5e8]], [[1.0, 0.0, 0.0]], [0.0], [1e10], bits, aabb=big, grid_resolution=4,
                            step_size=1e-3, max_samples=1 << 20)
    assert cnt[0] < 1 << 20


# ---- bad inputs ------------------------------------------------------------------------------
GOOD = dict(origins=np.zeros((2, 3), np.float32), directions=np.ones((2, 3), np.float32),
            near=np.zeros(2, np.float32), far=np.ones(2, np.float32), occupancy=np.zeros((1, 8), np.uint8))


@pytest.mark.parametrize("change,message", [
    (dict(origins=np.zeros((2, 4), np.float32)), "'origins' must be \\[R, 3\\]"),
    (dict(directions=np.zeros((3, 3), np.float32)), "'directions' must be \\[R, 3\\]"),
    (dict(near=np.zeros(3, np.float32)), "'near' must be \\[R\\]"),
    (dict(far=np.zeros((2, 1), np.float32)), "'far' must be \\[R\\]"),
    (dict(occupancy=np.zeros((1, 9), np.uint8)), "'occupancy' must be a uint8 bitfield \\[C, ceil\\(G\\^3 / 8\\)\\]"),
    (dict(occupancy=np.zeros((17, 8), np.uint8)), "1 <= C <= 16"),
    (dict(aabb=[0, 0, 0, 1, 1]), "'aabb' must be"),
    (dict(aabb=[0, 0, 0, 1, -1, 1]), "min < max on every axis"),
    (dict(grid_resolution=0), "'grid_resolution' must be in"),
    (dict(step_size=0.0), "'step_size' must be finite and > 0"),
    (dict(step_size=float("nan")), "'step_size' must be finite and > 0"),
    (dict(cone_angle=-1.0), "'cone_angle' must be finite and >= 0"),
    (dict(max_step_size=0.01), "'max_step_size' must be >= step_size"),
    (dict(max_samples=0), "'max_samples' must be >= 1"),
])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_inputs(change, message, mode):
    args = dict(GOOD, aabb=UNIT, grid_resolution=4, step_size=0.1)
    args.update(change)
    if mode == "eager":
        fn = lambda: metal_ops.ray_march(**args)  # noqa: E731
    else:
        fn = lambda: tf.function(lambda: metal_ops.ray_march(**args))()  # noqa: E731
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        fn()


def test_kernel_checks_shapes_unknown_to_the_shape_function():
    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)] * 4 + [tf.TensorSpec(None, tf.uint8)])
    def f(o, d, n, fa, occ):
        return metal_ops.ray_march(o, d, n, fa, occ, aabb=UNIT, grid_resolution=4, step_size=0.1)

    with pytest.raises(tf.errors.InvalidArgumentError, match="'near' must be \\[R\\] = \\[2\\]"):
        f(GOOD["origins"], GOOD["directions"], np.zeros(3, np.float32), GOOD["far"], GOOD["occupancy"])


@pytest.mark.parametrize("arg,value", [("origins", np.zeros((2, 3), np.float64)),
                                       ("near", np.zeros(2, np.float16)),
                                       ("occupancy", np.zeros((1, 8), np.int32))])
def test_wrong_dtypes_are_type_errors(arg, value):
    args = dict(GOOD, aabb=UNIT, grid_resolution=4, step_size=0.1)
    args[arg] = value
    with pytest.raises(TypeError, match=f"'{arg}' must be"):
        metal_ops.ray_march(**args)


def test_no_gradient_flows_through_the_samples():
    o = tf.constant(GOOD["origins"])
    with tf.GradientTape() as tape:
        tape.watch(o)
        out = metal_ops.ray_march(o, GOOD["directions"], GOOD["near"], GOOD["far"], np.full((1, 8), 255, np.uint8),
                                  aabb=UNIT, grid_resolution=4, step_size=0.1)
        y = tf.reduce_sum(out.t_starts)
    assert tape.gradient(y, o) is None


# ---- Metal shaders through the MSL shim ------------------------------------------------------
def shim_march(origins, dirs, near, far, bits, aabb, grid_resolution, step_size, cone_angle=0.0, max_step_size=1e10,
               max_samples=1024, jitter=False, seed=0, grid=64, scan_threads=1024):
    import ctypes

    from tests.metal_shim.shim import f32, load_shim, ptr
    lib = load_shim()
    lib.shim_ray_march.restype = ctypes.c_longlong
    arrays = [np.ascontiguousarray(a) for a in (origins, dirs, near, far, bits)]
    rays = len(origins)
    capacity = rays * max_samples
    counts, offsets = np.full(rays, -1, np.int32), np.full(rays, -1, np.int32)
    ts, te = np.full(capacity, np.nan, np.float32), np.full(capacity, np.nan, np.float32)
    ri = np.full(capacity, -1, np.int32)
    err = ctypes.create_string_buffer(512)
    total = lib.shim_ray_march((ctypes.c_float * 6)(*aabb), grid_resolution, bits.shape[0], f32(step_size),
                               f32(cone_angle), f32(max_step_size), max_samples, int(jitter), seed, rays,
                               *[ptr(a) for a in arrays], ptr(counts), ptr(offsets), ptr(ts), ptr(te), ptr(ri),
                               ctypes.c_longlong(capacity), ctypes.c_uint(grid), scan_threads, err, 512)
    assert total >= 0, err.value.decode()
    return ts[:total], te[:total], ri[:total], offsets, counts


@pytest.mark.parametrize("g,cascades,fill", [(4, 1, 0.5), (8, 2, 0.3), (5, 3, 0.6)])
@pytest.mark.parametrize("grid,scan_threads", [(1, 1), (64, 1024), (7, 5)])
@pytest.mark.parametrize("cone_angle,jitter", [(0.0, False), (0.02, True)])
def test_metal_shaders_on_msl_shim(g, cascades, fill, grid, scan_threads, cone_angle, jitter):
    origins, dirs, near, far, bits = random_case(g * 10 + cascades, 61, g, cascades, fill)
    kw = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.0123, cone_angle=cone_angle,
              max_step_size=0.2, max_samples=300, jitter=jitter, seed=3)
    got = shim_march(origins, dirs, near, far, bits, grid=grid, scan_threads=scan_threads, **kw)
    assert_same_samples(got, reference(origins, dirs, near, far, bits, **kw))
