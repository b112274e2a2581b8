"""GaussianTileBin (projected Gaussians binned into image tiles, sorted by
depth): the kernel vs the NumPy reference's sort
(tests/reference/gaussian_tile_bin.py), ties, tile edges, empty sets, the
shape function and bad inputs. CUDA: tests/cuda/test_gaussian_tile_bin_cuda.py."""
import ctypes

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.gaussian_project import scene
from tests.metal_shim.shim import load_shim, ptr, u32
from tests.reference import gaussian_project as project_ref
from tests.reference import gaussian_tile_bin as ref

pytestmark = pytest.mark.every_device

ERRORS = (tf.errors.InvalidArgumentError, ValueError)


def binned(means2d, radii, depths, **attrs):
    return [t.numpy() for t in metal_ops.gaussian_tile_bin(means2d, radii, depths, **attrs)]


def projected(n, width, height, seed=0):
    inputs = scene(np.random.default_rng(seed), n, width, height)
    means2d, _, depths, radii = project_ref.project(*inputs, width, height)
    return means2d.astype(np.float32), radii, depths.astype(np.float32)


@pytest.mark.parametrize("n,width,height,tile_size", [(1, 64, 48, 16), (1000, 64, 48, 16), (4000, 800, 600, 16),
                                                      (3000, 200, 150, 8), (500, 17, 5, 16), (300, 64, 48, 1),
                                                      (2000, 100, 70, 32)])
def test_matches_the_reference_sort(n, width, height, tile_size):
    means2d, radii, depths = projected(n, width, height, seed=n)
    ids, ranges = binned(means2d, radii, depths, width=width, height=height, tile_size=tile_size)
    want_ids, want_ranges = ref.tile_bin(means2d, radii, depths, width, height, tile_size)
    assert ids.dtype == np.int32 and ranges.shape == (-(-height // tile_size) * -(-width // tile_size), 2)
    np.testing.assert_array_equal(ranges, want_ranges)
    np.testing.assert_array_equal(ids, want_ids)
    # Each tile's Gaussians are front to back.
    for start, end in ranges[::7]:
        assert np.all(np.diff(depths[ids[start:end]]) >= 0)


def scattered(rng, n, width, height, radii, depths):
    """n Gaussians with means over the image and the given radii [n, 2] and depths."""
    means2d = (rng.random((n, 2)) * [width, height]).astype(np.float32)
    return means2d, np.asarray(radii, np.int32), np.asarray(depths, np.float32)


# The Metal plan's sort (tests/test_metal_plans.py runs these through the
# model): one Gaussian on 19200 tiles; 500 equal depths (only the index
# orders them); about 100000 intersections over 187500 tiles (seven 8-bit
# radix passes of about a hundred threadgroups each).
@pytest.mark.parametrize("case", ["one_covers_many_tiles", "equal_depths", "many_intersections"])
def test_sort_is_stable_over_many_tiles_and_intersections(case):
    rng = np.random.default_rng(7)
    if case == "one_covers_many_tiles":
        width, height, tile_size = 640, 480, 4
        inputs = (np.array([[300.5, 200.25]], np.float32), np.array([[2000, 1500]], np.int32), np.array([2.0], np.float32))
    elif case == "equal_depths":
        width, height, tile_size = 100, 70, 16
        inputs = scattered(rng, 500, width, height, rng.integers(1, 20, (500, 2)), np.full(500, 3.0))
    else:
        width, height, tile_size = 2000, 1500, 4
        inputs = scattered(rng, 400, width, height, rng.integers(20, 40, (400, 2)), rng.choice([-1.5, -0.5, 0.25, 1.0, 2.0], 400))
    ids, ranges = binned(*inputs, width=width, height=height, tile_size=tile_size)
    want_ids, want_ranges = ref.tile_bin(*inputs, width, height, tile_size)
    np.testing.assert_array_equal(ranges, want_ranges)
    np.testing.assert_array_equal(ids, want_ids)
    if case == "many_intersections":
        assert len(ids) > 2**16 and len(ranges) > 2**17


def test_ties_keep_index_order_and_negative_depths_sort_first():
    means2d = np.full((6, 2), 8.0, np.float32)
    radii = np.array([[3, 3], [3, 2], [0, 0], [3, 3], [2, 3], [3, 3]], np.int32)
    depths = np.array([2.0, 1.0, 0.5, 2.0, -1.0, 1.0], np.float32)
    ids, ranges = binned(means2d, radii, depths, width=16, height=16)
    np.testing.assert_array_equal(ids, [4, 1, 5, 0, 3])
    np.testing.assert_array_equal(ranges, [[0, 5]])


def test_tile_rectangle_edges():
    """floor((u - r) / 16) and ceil((u + r) / 16), clamped: a Gaussian whose
    box ends exactly on a tile edge does not touch the next tile."""
    means2d = np.array([[16, 16], [17.5, 8], [-10, -10], [100, 5], [np.nan, 8]], np.float32)
    radii = np.repeat(np.array([16, 1, 12, 200, 4], np.int32)[:, None], 2, 1)
    depths = np.ones(5, np.float32)
    ids, ranges = binned(means2d, radii, depths, width=48, height=32)
    tiles = {t: list(ids[s:e]) for t, (s, e) in enumerate(ranges)}
    assert tiles == {0: [0, 2, 3], 1: [0, 1, 3], 2: [3], 3: [0, 3], 4: [0, 3], 5: [3]}
    np.testing.assert_array_equal(ids, ref.tile_bin(means2d, radii, depths, 48, 32)[0])


def test_tile_rectangle_per_axis():
    """radii (x, y): floor((u - rx) / 16) to ceil((u + rx) / 16) across,
    floor((v - ry) / 16) to ceil((v + ry) / 16) down; a 0 on either axis
    touches no tile."""
    means2d = np.full((4, 2), 8.0, np.float32)
    radii = np.array([[20, 1], [1, 20], [5, 0], [0, 5]], np.int32)
    depths = np.arange(4, dtype=np.float32)
    ids, ranges = binned(means2d, radii, depths, width=48, height=32)
    tiles = {t: list(ids[s:e]) for t, (s, e) in enumerate(ranges) if e > s}
    assert tiles == {0: [0, 1], 1: [0], 3: [1]}
    np.testing.assert_array_equal(ids, ref.tile_bin(means2d, radii, depths, 48, 32)[0])


@pytest.mark.parametrize("n", [0, 5])
def test_no_intersection(n):
    radii = np.zeros((n, 2), np.int32)
    ids, ranges = binned(np.zeros((n, 2), np.float32), radii, np.ones(n, np.float32), width=40, height=20)
    assert ids.shape == (0,) and ranges.shape == (6, 2) and not ranges.any()


def test_shape_function_and_no_gradient():
    fn = tf.function(lambda m, r, d: metal_ops.gaussian_tile_bin(m, r, d, width=100, height=50, tile_size=16))
    out = fn.get_concrete_function(tf.TensorSpec([None, 2]), tf.TensorSpec([None, 2], tf.int32),
                                   tf.TensorSpec([None])).structured_outputs
    assert out.gaussian_ids.shape.as_list() == [None] and out.tile_ranges.shape.as_list() == [28, 2]
    means2d = tf.constant([[5.0, 5.0]])
    with tf.GradientTape() as tape:
        tape.watch(means2d)
        ids = metal_ops.gaussian_tile_bin(means2d, [[3, 3]], [1.0], width=8, height=8).gaussian_ids
    assert tape.gradient(tf.cast(ids, tf.float32), means2d) is None


@pytest.mark.parametrize("args,message", [
    (((4, 3), (4, 2), (4,)), r"'means2d' must be \[N, 2\]"),
    (((4, 2), (3, 2), (4,)), r"'radii' must be \[N, 2\] = \[4,2\]"),
    (((4, 2), (4,), (4,)), r"'radii' must be \[N, 2\] = \[4,2\] .*got shape \[4\]"),
    (((4, 2), (4, 2), (4, 1)), r"'depths' must be \[N\] = \[4\]")])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_shapes_name_the_argument(args, message, mode):
    m, r, d = args
    fn = lambda *v: metal_ops.gaussian_tile_bin(*v, width=16, height=16)  # noqa: E731
    fn = fn if mode == "eager" else tf.function(fn)
    with pytest.raises(ERRORS, match="GaussianTileBin: " + message):
        fn(np.zeros(m, np.float32), np.zeros(r, np.int32), np.zeros(d, np.float32))


@pytest.mark.parametrize("attrs,message", [(dict(width=0, height=8), "'width' must be"),
                                           (dict(width=8, height=8, tile_size=0), "'tile_size' must be"),
                                           (dict(width=8, height=8, tile_size=512), "'tile_size' must be")])
def test_bad_attributes_name_the_attribute(attrs, message):
    with pytest.raises(ERRORS, match=message):
        metal_ops.gaussian_tile_bin(np.zeros((1, 2), np.float32), np.ones((1, 2), np.int32),
                                    np.ones(1, np.float32), **attrs)


def test_wrong_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="gaussian_tile_bin: 'radii' must be int32, got float32"):
        metal_ops.gaussian_tile_bin(np.zeros((1, 2), np.float32), np.ones((1, 2), np.float32), np.ones(1, np.float32),
                                    width=8, height=8)


# ---- Metal shaders through the MSL shim --------------------------------------------------
@pytest.mark.source_tree("the Metal shaders (MSL shim)")
@pytest.mark.parametrize("m,shift,reverse", [(1, 0, 0), (1000, 8, 1), (5000, 32, 0), (5000, 56, 1)])
def test_radix_pass_on_msl_shim_is_a_stable_scatter(m, shift, reverse):
    """One radix pass of the fill plan (digit counts, their scan, the scatter;
    threads in order or reversed between barriers) is a stable sort by the digit."""
    fn = load_shim().shim_gaussian_tile_bin_radix_pass
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int]
    fn.restype = ctypes.c_char_p
    rng = np.random.default_rng(m + shift)
    keys = rng.integers(0, 2**64 - 1, m, dtype=np.uint64, endpoint=True)
    ids = np.arange(m, dtype=np.int32)[::-1].copy()
    keys_out, ids_out = np.zeros_like(keys), np.full(m, -1, np.int32)
    assert fn(ptr(keys), ptr(ids), ptr(keys_out), ptr(ids_out), u32(m), u32(shift), reverse) is None
    order = np.argsort((keys >> np.uint64(shift)) & np.uint64(255), kind="stable")
    np.testing.assert_array_equal(keys_out, keys[order])
    np.testing.assert_array_equal(ids_out, ids[order])
