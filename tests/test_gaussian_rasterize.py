"""GaussianRasterize (3D Gaussian splatting's rasterization): the kernels against
the float64 NumPy reference (tests/reference/gaussian_rasterize.py, binned by
its own tile_bin), the reference's gradients against finite differences,
gradients, shapes and bad inputs, and the Metal shaders through the MSL
shim. CUDA: tests/cuda/test_gaussian_rasterize_cuda.py."""
import ctypes

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.metal_shim.shim import i64, load_shim_functions, ptr, u32
from tests.reference import gaussian_rasterize as ref

pytestmark = pytest.mark.every_device

FLOATS = ["means2d", "conics", "colors", "opacities", "background"]


def scene(n, c, width, height, tile_size=16, seed=0, **kw):
    return ref.scene(np.random.default_rng(seed), n, c, width, height, tile_size, **kw)


def attrs_of(width, height, tile_size=16):
    return {"width": width, "height": height, "tile_size": tile_size}


def op_with_grad(inputs, attrs, v_image, v_alpha):
    """(image, alpha, gradients of sum(v_image * image) + sum(v_alpha * alpha) w.r.t. the float inputs)."""
    floats = [tf.constant(x) for x in inputs[:5]]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        image, alpha = metal_ops.gaussian_rasterize(*floats, *inputs[5:], **attrs)
        loss = tf.reduce_sum(image * v_image) + tf.reduce_sum(alpha * v_alpha)
    return image.numpy(), alpha.numpy(), [g.numpy() for g in tape.gradient(loss, floats)]


def cotangents(image_shape, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, image_shape).astype(np.float32),
            rng.uniform(-1, 1, image_shape[:2]).astype(np.float32))


def assert_close_scaled(got, want, tol):
    """|got - want| <= tol * max(1, max |want|), array by array."""
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=tol * max(1.0, np.abs(w).max(initial=0)))


# ---- the reference ---------------------------------------------------------------------------
def test_tile_bin_sorts_by_tile_then_depth_then_index():
    means2d = np.array([[8.0, 8.0], [20.0, 8.0], [8.0, 8.0], [40.0, 40.0]])
    ids, ranges = ref.tile_bin(means2d, np.array([[3, 3], [6, 6], [3, 3], [0, 0]]), np.array([2.0, 1.0, 2.0, 0.5]), 32, 20)
    # tiles_x 2, tiles_y 2; Gaussian 1 spans tiles 0 and 1 (x in [14, 26]); Gaussian 3 is culled.
    np.testing.assert_array_equal(ids, [1, 0, 2, 1])
    np.testing.assert_array_equal(ranges, [[0, 3], [3, 4], [4, 4], [4, 4]])


def test_reference_gradient_matches_finite_differences():
    """The reference's vjp against central differences of its own rasterize,
    in float64, on a scene whose alphas stay away from 1/255, 0.99 and the
    transmittance threshold under the step."""
    width, height = 21, 18
    inputs = [np.asarray(x, np.float64) if i < 5 else x
              for i, x in enumerate(scene(10, 3, width, height, seed=3, scale=(3.0, 8.0), opacity=(0.2, 0.8)))]
    v_image, v_alpha = cotangents((height, width, 3), seed=4)
    sizes = (width, height, 16)

    def loss(xs):
        image, alpha, _ = ref.rasterize(*xs, *inputs[5:], *sizes)
        return np.sum(image * v_image) + np.sum(alpha * v_alpha)

    grads = ref.vjp(*inputs, *sizes, v_image, v_alpha)
    eps = 1e-6
    for k in range(5):
        numeric = np.zeros_like(inputs[k])
        for index in np.ndindex(inputs[k].shape):
            xs = [x.copy() for x in inputs[:5]]
            xs[k][index] += eps
            up = loss(xs)
            xs[k][index] -= 2 * eps
            numeric[index] = (up - loss(xs)) / (2 * eps)
        np.testing.assert_allclose(grads[k], numeric, rtol=1e-5, atol=1e-6, err_msg=FLOATS[k])


# ---- values ----------------------------------------------------------------------------------
CASES = [  # n, channels, width, height, tile_size
    (0, 3, 16, 16, 16),
    (1, 1, 1, 1, 16),
    (60, 3, 37, 29, 16),
    (300, 3, 64, 48, 16),
    (40, 1, 20, 24, 8),
    (40, 5, 33, 17, 16),
    (25, 3, 10, 70, 32),
    (30, 2, 19, 23, 5),
]


@pytest.mark.parametrize("n,c,width,height,tile_size", CASES)
def test_values_match_numpy(n, c, width, height, tile_size):
    inputs = scene(n, c, width, height, tile_size, seed=n + width)
    image, alpha = metal_ops.gaussian_rasterize(*inputs, **attrs_of(width, height, tile_size))
    want_image, want_alpha, _ = ref.rasterize(*inputs, width, height, tile_size)
    assert image.shape == (height, width, c) and alpha.shape == (height, width)
    assert image.dtype == tf.float32 and alpha.dtype == tf.float32
    np.testing.assert_allclose(image.numpy(), want_image, rtol=0, atol=2e-5)
    np.testing.assert_allclose(alpha.numpy(), want_alpha, rtol=0, atol=2e-5)


def test_no_gaussian_gives_the_background():
    background = np.array([0.25, 0.5, 1.0], np.float32)
    inputs = scene(0, 3, 17, 5)[:4] + [background, np.zeros(0, np.int32), np.zeros((2, 2), np.int32)]
    image, alpha = metal_ops.gaussian_rasterize(*inputs, width=17, height=5)
    np.testing.assert_array_equal(image.numpy(), np.broadcast_to(background, (5, 17, 3)))
    np.testing.assert_array_equal(alpha.numpy(), 0)


def test_saturated_pixels_stop_early_and_last_ids_match():
    """Many opaque Gaussians over the centre: pixels stop before their tile's
    last Gaussian (transmittance 1e-4), the clamped alpha (0.99) is reached
    (opacity 1), and the kernel's last_ids are the reference's."""
    width, height = 40, 36
    inputs = scene(80, 3, width, height, seed=9, scale=(6.0, 14.0), opacity=(0.7, 1.0))
    inputs[0][:] = np.random.default_rng(2).uniform([10, 10], [30, 26], (80, 2))
    inputs[5], inputs[6] = ref.tile_bin(inputs[0], np.full((80, 2), 40), np.arange(80.0), width, height)
    lib = metal_ops.load_library()
    image, alpha, last_ids = lib.metal_ops_gaussian_rasterize(*inputs, width=width, height=height)
    want_image, want_alpha, want_last = ref.rasterize(*inputs, width, height)
    ranges = inputs[6].reshape(3, 3, 2)
    tile_end = ranges[np.arange(height)[:, None] // 16, np.arange(width)[None, :] // 16, 1]
    assert np.sum(want_last < tile_end) > 100 and want_alpha.max() > 0.999
    np.testing.assert_array_equal(last_ids.numpy(), want_last)
    np.testing.assert_allclose(image.numpy(), want_image, rtol=0, atol=2e-5)
    np.testing.assert_allclose(alpha.numpy(), want_alpha, rtol=0, atol=2e-5)


@pytest.mark.parametrize("n,c,width,height,tile_size", [CASES[2], CASES[4], CASES[7]])
def test_last_ids_are_one_past_the_last_composited(n, c, width, height, tile_size):
    inputs = scene(n, c, width, height, tile_size, seed=n + width)
    _, _, last_ids = metal_ops.load_library().metal_ops_gaussian_rasterize(*inputs, **attrs_of(width, height, tile_size))
    np.testing.assert_array_equal(last_ids.numpy(), ref.rasterize(*inputs, width, height, tile_size)[2])


# ---- gradients -------------------------------------------------------------------------------
@pytest.mark.parametrize("n,c,width,height,tile_size", CASES)
def test_gradients_match_numpy(n, c, width, height, tile_size):
    inputs = scene(n, c, width, height, tile_size, seed=n + width)
    v_image, v_alpha = cotangents((height, width, c), seed=n)
    _, _, grads = op_with_grad(inputs, attrs_of(width, height, tile_size), v_image, v_alpha)
    want = ref.vjp(*inputs, width, height, tile_size, v_image, v_alpha)
    for g, w, name in zip(grads, want, FLOATS):
        assert g.shape == w.shape, name
    assert_close_scaled(grads, want, 2e-4)


def test_gradients_of_saturated_pixels_match_numpy():
    width, height = 40, 36
    inputs = scene(80, 3, width, height, seed=9, scale=(6.0, 14.0), opacity=(0.7, 1.0))
    v_image, v_alpha = cotangents((height, width, 3), seed=5)
    _, _, grads = op_with_grad(inputs, attrs_of(width, height), v_image, v_alpha)
    assert_close_scaled(grads, ref.vjp(*inputs, width, height, 16, v_image, v_alpha), 2e-4)


def test_compute_gradient():
    """tf.test.compute_gradient on a scene where every Gaussian covers the
    whole 8x6 image with alpha well inside (1/255, 0.99) and T far above 1e-4,
    so float32 differences cross no threshold."""
    rng = np.random.default_rng(7)
    means2d = rng.uniform(2, 6, (3, 2)).astype(np.float32)
    conics = np.array([[0.004, 0.001, 0.003], [0.002, -0.0005, 0.005], [0.003, 0.0, 0.003]], np.float32)
    colors = rng.uniform(0, 1, (3, 3)).astype(np.float32)
    opacities = np.array([0.3, 0.5, 0.4], np.float32)
    background = np.array([0.2, 0.4, 0.6], np.float32)
    ids, ranges = np.array([2, 0, 1], np.int32), np.array([[0, 3]], np.int32)

    def f(*x):
        image, alpha = metal_ops.gaussian_rasterize(*x, ids, ranges, width=8, height=6)
        return tf.concat([tf.reshape(image, [-1]), tf.reshape(alpha, [-1])], 0)

    theoretical, numerical = tf.test.compute_gradient(f, [means2d, conics, colors, opacities, background], delta=1e-3)
    for t, m, name in zip(theoretical, numerical, FLOATS):
        np.testing.assert_allclose(t, m, rtol=1e-2, atol=2e-3 * max(1.0, np.abs(m).max()), err_msg=name)


def test_gradient_in_tf_function_and_of_alpha_alone():
    width, height = 37, 29
    inputs = scene(60, 3, width, height, seed=11)

    @tf.function
    def f(means2d):
        with tf.GradientTape() as tape:
            tape.watch(means2d)
            _, alpha = metal_ops.gaussian_rasterize(means2d, *inputs[1:], width=width, height=height)
            loss = tf.reduce_sum(alpha)
        return tape.gradient(loss, means2d)

    got = f(tf.constant(inputs[0])).numpy()
    want = ref.vjp(*inputs, width, height, 16, np.zeros((height, width, 3)), np.ones((height, width)))[0]
    assert_close_scaled([got], [want], 2e-4)


def wide_scene():
    """300 small Gaussians and 4 large ones that each of the 63 tiles lists
    first: each Gaussian's intersections (the backward sums their rows) are
    one to 63, spread over the tiles; more Gaussians than one threadgroup of
    the lists pass takes."""
    width, height, tile_size = 72, 56, 8
    rng = np.random.default_rng(21)
    small = ref.scene(rng, 300, 3, width, height, tile_size, scale=(1.0, 4.0))
    large = ref.scene(rng, 4, 3, width, height, tile_size, scale=(18.0, 28.0), opacity=(0.05, 0.3))
    floats = [np.concatenate([s, g]) for s, g in zip(small[:4], large[:4])] + [small[4]]
    ids = np.concatenate([np.concatenate([np.arange(300, 304), small[5][start:end]]) for start, end in small[6]])
    ends = np.cumsum(small[6][:, 1] - small[6][:, 0] + 4)
    ranges = np.stack([np.concatenate([[0], ends[:-1]]), ends], -1)
    return floats + [ids.astype(np.int32), ranges.astype(np.int32)], width, height, tile_size


def test_gradients_of_gaussians_that_many_tiles_see_match_numpy():
    inputs, width, height, tile_size = wide_scene()
    assert np.bincount(inputs[5]).max() == 63
    v_image, v_alpha = cotangents((height, width, 3), seed=2)
    _, _, grads = op_with_grad(inputs, attrs_of(width, height, tile_size), v_image, v_alpha)
    assert_close_scaled(grads, ref.vjp(*inputs, width, height, tile_size, v_image, v_alpha), 2e-4)


def no_intersections(width=20, height=12):
    """Five Gaussians that no tile lists (M = 0; 16-pixel tiles)."""
    return scene(5, 3, width, height)[:5] + [np.zeros(0, np.int32), np.zeros((2, 2), np.int32)], width, height


def test_gradients_without_intersections():
    """M = 0: the Gaussians' gradients are zero, the background's the sum of grad_image."""
    inputs, width, height = no_intersections()
    v_image, v_alpha = cotangents((height, width, 3))
    _, _, grads = op_with_grad(inputs, attrs_of(width, height), v_image, v_alpha)
    for g in grads[:4]:
        np.testing.assert_array_equal(g, 0)
    np.testing.assert_allclose(grads[4], v_image.sum((0, 1)), rtol=1e-5)


@pytest.mark.cpu_semantics("the CPU backward is bitwise reproducible")
@pytest.mark.parametrize("wide", [False, True])
def test_backward_is_deterministic(wide):
    inputs, width, height, tile_size = wide_scene() if wide else (scene(300, 3, 64, 48, seed=12), 64, 48, 16)
    v_image, v_alpha = cotangents((height, width, 3))
    a = op_with_grad(inputs, attrs_of(width, height, tile_size), v_image, v_alpha)[2]
    b = op_with_grad(inputs, attrs_of(width, height, tile_size), v_image, v_alpha)[2]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ---- shapes ----------------------------------------------------------------------------------
def test_shape_function():
    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
    def f(means2d, colors):
        n = tf.shape(means2d)[0]
        image, alpha = metal_ops.gaussian_rasterize(means2d, tf.zeros([n, 3]), colors, tf.zeros([n]), tf.zeros([4]),
                                                    tf.zeros([0], tf.int32), tf.zeros([6, 2], tf.int32),
                                                    width=40, height=20)
        assert image.shape.as_list() == [20, 40, 4] and alpha.shape.as_list() == [20, 40]
        return image

    f.get_concrete_function()


# ---- bad inputs ------------------------------------------------------------------------------
def call(inputs, **attrs):
    return metal_ops.gaussian_rasterize(*inputs, **{**attrs_of(37, 29), **attrs})


@pytest.mark.parametrize("index,shape,message", [
    (0, (60, 3), r"'means2d' must be \[N, 2\]"),
    (1, (60, 2), r"'conics' must be \[N, 3\]"),
    (1, (59, 3), r"'conics' must be \[N, 3\] \(a, b, c\), N as in 'means2d'"),
    (2, (61, 3), r"'colors' must be \[N, C\]"),
    (2, (60, 0), r"'colors' must have at least one channel"),
    (3, (60, 1), r"'opacities' must be \[N\]"),
    (4, (2,), r"'background' must be \[C\]"),
    (5, (3, 1), r"'gaussian_ids' must be \[M\]"),
    (6, (4, 2), r"'tile_ranges' must be \[tiles_y \* tiles_x, 2\] = \[6, 2\] for width 37, height 29 and tile_size 16"),
    (6, (6, 3), r"'tile_ranges' must be \[tiles_y \* tiles_x, 2\]"),
])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_shapes_name_the_argument(index, shape, message, mode):
    inputs = scene(60, 3, 37, 29)
    inputs[index] = np.zeros(shape, inputs[index].dtype)
    fn = call if mode == "eager" else tf.function(call)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="GaussianRasterize: " + message):
        fn(inputs)


def test_tile_ranges_must_match_the_size_and_tile():
    inputs = scene(60, 3, 37, 29)  # 3 x 2 tiles of 16
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"= \[20, 2\] for width 37, height 29 and tile_size 8"):
        call(inputs, tile_size=8)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"= \[9, 2\] for width 37, height 40"):
        call(inputs, height=40)


@pytest.mark.cpu_semantics("the CPU kernels check the index values")
@pytest.mark.parametrize("bad", [-1, 60, 1 << 30])
def test_ids_out_of_range_name_gaussian_ids(bad):
    inputs = scene(60, 3, 37, 29)
    inputs[5] = inputs[5].copy()
    inputs[5][7] = bad
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"'gaussian_ids' must index the 60 Gaussians, got gaussian_ids\[7\] = {bad}"):
        call(inputs)


@pytest.mark.cpu_semantics("the CPU kernels check the index values")
@pytest.mark.parametrize("start,end", [(-1, 3), (5, 4), (0, 10 ** 6)])
def test_bad_tile_ranges_name_tile_ranges(start, end):
    inputs = scene(60, 3, 37, 29)
    inputs[6] = inputs[6].copy()
    inputs[6][4] = start, end
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"'tile_ranges' must hold ranges .* got \[{start}, {end}\) for tile 4"):
        call(inputs)


@pytest.mark.cpu_semantics("the CPU kernels check the index values")
def test_grad_op_checks_its_inputs():
    lib = metal_ops.load_library()
    inputs = scene(60, 3, 37, 29)
    _, alpha, last_ids = lib.metal_ops_gaussian_rasterize(*inputs, width=37, height=29)
    v_image, v_alpha = cotangents((29, 37, 3))
    bad = last_ids.numpy().copy()
    bad[3, 4] = -5
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"GaussianRasterizeGrad: 'last_ids' must be the forward's, got -5 at pixel \(3, 4\)"):
        lib.metal_ops_gaussian_rasterize_grad(*inputs, alpha, bad, v_image, v_alpha, width=37, height=29)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"GaussianRasterizeGrad: 'grad_image' must be \[height, width, C\]"):
        lib.metal_ops_gaussian_rasterize_grad(*inputs, alpha, last_ids, v_image[:, :, :2], v_alpha, width=37, height=29)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"GaussianRasterizeGrad: 'alpha' must be \[height, width\]"):
        lib.metal_ops_gaussian_rasterize_grad(*inputs, alpha[1:], last_ids, v_image, v_alpha, width=37, height=29)


@pytest.mark.parametrize("name,value,message", [
    ("width", 0, r"'width' must be in \[1, 65536\], got 0"),
    ("height", 70000, r"'height' must be in \[1, 65536\], got 70000"),
    ("tile_size", 0, r"'tile_size' must be in \[1, 32\], got 0"),
    ("tile_size", 33, r"'tile_size' must be in \[1, 32\], got 33"),
])
def test_bad_attributes_name_the_attribute(name, value, message):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        call(scene(60, 3, 37, 29), **{name: value})


@pytest.mark.parametrize("value", [2.0, "4", None, True])
def test_non_integer_width_is_a_type_error(value):
    with pytest.raises(TypeError, match="'width'"):
        call(scene(60, 3, 37, 29), width=value)


@pytest.mark.parametrize("index", range(7))
def test_wrong_dtypes_name_the_argument(index):
    inputs = scene(60, 3, 37, 29)
    wrong = np.float64 if index < 5 else np.int64
    inputs[index] = inputs[index].astype(wrong)
    name = (FLOATS + ["gaussian_ids", "tile_ranges"])[index]
    want = "float32" if index < 5 else "int32"
    with pytest.raises(TypeError, match=f"gaussian_rasterize: '{name}' must be {want}, got {np.dtype(wrong).name}"):
        call(inputs)


# ---- Metal shaders through the MSL shim ------------------------------------------------------
def shim_lib():
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    sizes = [ctypes.c_int64, ctypes.c_int64] + [i32] * 5
    lib = load_shim_functions({"shim_gaussian_rasterize_forward": [vp] * 10 + sizes,
                               "shim_gaussian_rasterize_backward": [vp] * 16 + sizes + [ctypes.c_uint32],
                               "shim_gaussian_rasterize_find_every_kernel": []})
    lib.shim_gaussian_rasterize_error.restype = ctypes.c_char_p
    return lib


@pytest.mark.source_tree("the Metal shaders (MSL shim)")
@pytest.mark.parametrize("n,c,width,height,tile_size,reverse", [
    (0, 3, 16, 16, 16, 0), (1, 1, 5, 7, 16, 1), (200, 3, 37, 29, 16, 0), (200, 1, 33, 17, 16, 1),
    (40, 3, 19, 23, 8, 1), (30, 2, 19, 23, 5, 0)])
def test_metal_shaders_on_msl_shim(n, c, width, height, tile_size, reverse):
    """The shaders, their threadgroups run as cooperating fibers (in reverse
    order too), against the reference, the backward's list and sum passes
    on grids of 1, 3 and 64 threads."""
    assert shim_lib().shim_gaussian_rasterize_find_every_kernel() == 0
    check_on_shim(scene(n, c, width, height, tile_size, seed=n + width), width, height, tile_size, reverse)


@pytest.mark.source_tree("the Metal shaders (MSL shim)")
def test_metal_forward_stops_once_every_pixel_is_done():
    """Tiles with more Gaussians than threads (batches) whose pixels all stop
    before the tile's last batch."""
    width, height, tile_size = 24, 20, 8
    inputs = scene(300, 3, width, height, tile_size, seed=9, scale=(6.0, 14.0), opacity=(0.7, 1.0))
    _, _, last = ref.rasterize(*inputs, width, height, tile_size)
    ranges, threads = inputs[6], 64
    tiles_x = -(-width // tile_size)
    tile_of = (np.arange(height)[:, None] // tile_size) * tiles_x + np.arange(width)[None, :] // tile_size
    stopped = [t for t in range(len(ranges)) if last[tile_of == t].max() + threads <= ranges[t, 1]]
    assert stopped  # the forward leaves a batch of these tiles unread
    # Saturated pixels put float32's gradients near the reference tolerance:
    # the backward is held to the CPU kernel's, which it sums in the same order.
    v_image, v_alpha = cotangents((height, width, 3), seed=len(inputs[0]))
    cpu = op_with_grad(inputs, attrs_of(width, height, tile_size), v_image, v_alpha)[2]
    check_on_shim(inputs, width, height, tile_size, 1, want=(cpu, 1e-5))


@pytest.mark.source_tree("the Metal shaders (MSL shim)")
def test_metal_backward_sums_each_gaussians_intersections_in_index_order():
    """Gaussians that every tile lists, their lists filled in both thread
    orders, give the same bits; and M = 0."""
    inputs, width, height, tile_size = wide_scene()
    runs = [check_on_shim(inputs, width, height, tile_size, reverse) for reverse in (0, 1)]
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)
    inputs, width, height = no_intersections()
    check_on_shim(inputs, width, height, 16, 1)


def check_on_shim(inputs, width, height, tile_size, reverse, want=None):
    """The shaders' forward and backward on the shim against the reference
    (the gradients against want = (gradients, tolerance) where given); the
    backward's gradients, the same bits on every grid."""
    lib = shim_lib()
    inputs = [np.ascontiguousarray(x) for x in inputs]
    n, c, m = len(inputs[0]), inputs[2].shape[1], len(inputs[5])
    image, alpha = np.full((height, width, c), 7, np.float32), np.full((height, width), 7, np.float32)
    last_ids = np.full((height, width), -7, np.int32)
    sizes = (i64(n), i64(m), c, width, height, tile_size, reverse)
    assert lib.shim_gaussian_rasterize_forward(*[ptr(x) for x in inputs + [image, alpha, last_ids]], *sizes) == 0, \
        lib.shim_gaussian_rasterize_error()
    want_image, want_alpha, want_last = ref.rasterize(*inputs, width, height, tile_size)
    np.testing.assert_allclose(image, want_image, rtol=0, atol=2e-5)
    np.testing.assert_allclose(alpha, want_alpha, rtol=0, atol=2e-5)
    np.testing.assert_array_equal(last_ids, want_last)
    v_image, v_alpha = cotangents((height, width, c), seed=n)
    want, tol = want or (ref.vjp(*inputs, width, height, tile_size, v_image, v_alpha), 2e-4)
    first = None
    for grid in (1, 3, 64):
        grads = [np.full(x.shape, 7, np.float32) for x in inputs[:5]]
        assert lib.shim_gaussian_rasterize_backward(
            *[ptr(x) for x in inputs + [alpha, last_ids, v_image, v_alpha] + grads], *sizes, u32(grid)) == 0, \
            lib.shim_gaussian_rasterize_error()
        assert_close_scaled(grads, want, tol)
        first = first or grads
        for x, y in zip(first, grads):
            np.testing.assert_array_equal(x, y)
    return first
