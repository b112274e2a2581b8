"""PackedVolumeRender: CPU kernels vs a NumPy float64 reference over packed
samples, equality with the fixed-S VolumeRender, gradients (finite differences
of the reference and tf.test.compute_gradient), early termination, empty
batches, bad layouts and values, shape inference, RayMarch's output end to
end, and the Metal shaders through the MSL shim."""
import ctypes
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops._loader import load_library
from tests.metal_shim.shim import f32, i64, load_shim, ptr, u32
from tests.reference import distortion_loss as distortion_ref
from tests.reference import packed_volume_render as ref
from tests.reference.render_testing import (GRADIENT_GRID, assert_compute_gradient, assert_grads_close, cotangents,
                                            make_background, render_grads)

pytestmark = pytest.mark.every_device

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-11)}

COUNTS = {
    "one": [1],
    "mixed": [3, 0, 5, 1, 0, 8],
    "all_empty": [0, 0, 0],
    "equal": [7, 7, 7, 7],
    "random": list(np.random.default_rng(5).integers(0, 40, size=33)),
    "no_rays": [],
}


def packed_with_margin(counts, eps, dtype=np.float32, surface=True, seed=0, sigma_scale=2.0):
    """make_packed with a seed whose transmittances stay clear of the threshold."""
    for s in range(seed, seed + 200):
        p = ref.make_packed(counts, seed=s, dtype=dtype, surface=surface, sigma_scale=sigma_scale)
        if ref.margin_ok(p[0], p[2], p[3], p[4], p[5], eps):
            return p
    raise AssertionError("no seed gives a margin around the early-termination threshold")


# ---- forward ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("counts", sorted(COUNTS))
@pytest.mark.parametrize("bg", ["none", "shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-4, 0.3])
def test_forward_matches_reference(dtype, counts, bg, eps):
    sigma, rgb, t0, t1, offsets, cnt = packed_with_margin(COUNTS[counts], eps, dtype)
    background = make_background(bg, len(cnt), dtype)
    out = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, cnt, background=background,
                                         early_termination=eps, return_weights=True)
    want = ref.render(sigma, rgb, t0, t1, offsets, cnt, background, eps)
    for got, w in zip(out, want):
        assert got.dtype == dtype and got.shape == w.shape
        np.testing.assert_allclose(got.numpy(), w, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_equals_fixed_s_volume_render_when_counts_are_equal(dtype, eps):
    # Contiguous intervals t[:, :-1] / t[:, 1:] of R rays of S samples each.
    R, S = 9, 12
    rng = np.random.default_rng(7)
    t = np.sort(rng.uniform(2, 6, size=(R, S + 1)), axis=1).astype(dtype)
    sigma = rng.uniform(0, 3, size=(R, S)).astype(dtype)
    rgb = rng.uniform(0, 1, size=(R, S, 3)).astype(dtype)
    bg = rng.uniform(0, 1, size=(R, 3)).astype(dtype)
    counts = np.full(R, S, np.int32)
    offsets = np.arange(R, dtype=np.int32) * S
    sigma_v, rgb_v, bg_v = tf.constant(sigma), tf.constant(rgb), tf.constant(bg)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([sigma_v, rgb_v, bg_v])
        fixed = metal_ops.volume_render(sigma_v, rgb_v, t, background=bg_v, early_termination=eps,
                                        return_weights=True)
        packed = metal_ops.packed_volume_render(
            tf.reshape(sigma_v, [-1]), tf.reshape(rgb_v, [-1, 3]), t[:, :-1].reshape(-1), t[:, 1:].reshape(-1),
            offsets, counts, background=bg_v, early_termination=eps, return_weights=True)
        loss_fixed = tf.reduce_sum(fixed.rgb * 1.5) + tf.reduce_sum(fixed.depth) + tf.reduce_sum(fixed.weights ** 2)
        loss_packed = (tf.reduce_sum(packed.rgb * 1.5) + tf.reduce_sum(packed.depth)
                       + tf.reduce_sum(packed.weights ** 2))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    for a, b in [(fixed.rgb, packed.rgb), (fixed.depth, packed.depth), (fixed.opacity, packed.opacity)]:
        np.testing.assert_allclose(b.numpy(), a.numpy(), **tol)
    np.testing.assert_allclose(packed.weights.numpy(), fixed.weights.numpy().reshape(-1), **tol)
    for a, b in zip(tape.gradient(loss_fixed, [sigma_v, rgb_v, bg_v]), tape.gradient(loss_packed, [sigma_v, rgb_v, bg_v])):
        np.testing.assert_allclose(b.numpy(), a.numpy(), **tol)


def test_forward_in_tf_function_with_unknown_shapes_matches_eager():
    sigma, rgb, t0, t1, offsets, counts = packed_with_margin([4, 0, 6, 2], 1e-4)
    bg = make_background("per_ray", 4, np.float32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec(None, tf.float32),
                                  tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32),
                                  tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec(None, tf.float32)])
    def f(*args):
        out = metal_ops.packed_volume_render(*args[:6], background=args[6], return_weights=True)
        return out.rgb, out.depth, out.opacity, out.weights

    eager = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, background=bg, return_weights=True)
    for a, b in zip(f(sigma, rgb, t0, t1, offsets, counts, bg), eager):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_many_rays_use_threads_and_match_reference():
    counts = np.random.default_rng(3).integers(0, 30, size=4096)
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed(counts, seed=3)
    out = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, early_termination=0.0)
    want = ref.render(sigma, rgb, t0, t1, offsets, counts, None, 0.0)
    for got, w in zip(out[:3], want[:3]):
        np.testing.assert_allclose(got.numpy(), w, **TOL[np.float32])


def test_rays_without_samples_show_the_background():
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed([0, 3, 0], seed=1)
    bg = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]], np.float32)
    out = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, background=bg, return_weights=True)
    np.testing.assert_array_equal(out.rgb.numpy()[[0, 2]], bg[[0, 2]])
    np.testing.assert_array_equal(out.opacity.numpy()[[0, 2]], 0.0)
    np.testing.assert_array_equal(out.depth.numpy()[[0, 2]], 0.0)
    assert out.weights.shape == (3,)


def test_output_namedtuple_and_weights_only_when_asked():
    p = ref.make_packed([2, 3])
    out = metal_ops.packed_volume_render(*p)
    assert isinstance(out, metal_ops.PackedVolumeRenderOutput) and out.weights is None
    assert metal_ops.packed_volume_render(*p, return_weights=True).weights.shape == (5,)


# ---- early termination --------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-4, 0.3])
def test_early_termination_skips_the_rest_of_the_ray(eps):
    # One opaque sample: every sample behind it has T < eps and gets weight 0,
    # forward and backward (its gradients are exactly 0).
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed([6, 5], seed=2, sigma_scale=0.1)
    sigma[2] = 1e4
    sigma[6 + 2] = 1e4  # (sample 1 of each ray has zero width)
    sigma_v, rgb_v = tf.constant(sigma), tf.constant(rgb)
    with tf.GradientTape() as tape:
        tape.watch([sigma_v, rgb_v])
        out = metal_ops.packed_volume_render(sigma_v, rgb_v, t0, t1, offsets, counts, early_termination=eps,
                                             return_weights=True)
        loss = tf.reduce_sum(out.rgb) + tf.reduce_sum(out.depth) + tf.reduce_sum(out.weights ** 2)
    g_sigma, g_rgb = tape.gradient(loss, [sigma_v, rgb_v])
    skipped = np.r_[3:6, 9:11]
    np.testing.assert_array_equal(out.weights.numpy()[skipped], 0.0)
    np.testing.assert_array_equal(g_sigma.numpy()[skipped], 0.0)
    np.testing.assert_array_equal(g_rgb.numpy()[skipped], 0.0)
    # ... and the used samples match the truncating reference.
    want = ref.render(sigma, rgb, t0, t1, offsets, counts, None, eps)
    np.testing.assert_allclose(out.weights.numpy(), want[3], **TOL[np.float32])


def test_early_termination_out_of_range_is_rejected():
    p = ref.make_packed([2])
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="early_termination"):
        metal_ops.packed_volume_render(*p, early_termination=1.5)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="early_termination"):
        load_library().metal_ops_packed_volume_render(*p[:6], np.zeros(3, np.float32), early_termination=-0.5)


# ---- gradients ----------------------------------------------------------------------


def op_grads(p, background, eps, cot, mode):
    """Gradients of <cot, outputs> through the op (GradientTape over tf.Variables)."""
    sigma, rgb, t0, t1, offsets, counts = p
    return render_grads(
        lambda s, c, b, with_weights: metal_ops.packed_volume_render(
            s, c, t0, t1, offsets, counts, background=b, early_termination=eps, return_weights=with_weights),
        sigma, rgb, background, cot, mode, variables=True)


@GRADIENT_GRID
def test_gradients_match_finite_differences_of_reference(dtype, bg, eps, with_weights, mode):
    counts = [4, 0, 6, 1, 5]
    p = packed_with_margin(counts, eps, dtype, sigma_scale=1.5)
    background = make_background(bg, len(counts), dtype)
    cot = cotangents(len(counts), sum(counts), dtype, with_weights)
    g_sigma, g_rgb, g_bg = op_grads(p, background, eps, cot, mode)
    n_sigma, n_rgb, n_bg = ref.numeric_grads(*p, background, eps, cot)
    assert_grads_close((g_sigma, g_rgb, g_bg), (n_sigma, n_rgb, n_bg), dtype, background)


@pytest.mark.parametrize("bg", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_compute_gradient_float64_all_outputs(bg, eps):
    counts = [3, 0, 5, 2]
    sigma, rgb, t0, t1, offsets, counts = packed_with_margin(counts, eps, np.float64, sigma_scale=1.5)
    sigma = sigma + 0.05  # compute_gradient perturbs inputs; keep sigma > 0
    assert ref.margin_ok(sigma, t0, t1, offsets, counts, eps)
    background = make_background(bg, len(counts), np.float64)

    def f(sigma_v, rgb_v, bg_v):
        out = metal_ops.packed_volume_render(sigma_v, rgb_v, t0, t1, offsets, counts, background=bg_v,
                                             early_termination=eps, return_weights=True)
        return tf.concat([tf.reshape(out.rgb, [-1]), out.depth, out.opacity, out.weights], 0)

    assert_compute_gradient(tf.test.compute_gradient(f, [sigma, rgb, background], delta=1e-6), rtol=1e-6, atol=1e-7)


def test_compute_gradient_float32():
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed([2, 4], seed=3, sigma_scale=1.0)
    sigma = sigma + np.float32(0.1)
    bg = np.array([0.3, 0.6, 0.9], np.float32)

    def f(sigma_v, rgb_v, bg_v):
        out = metal_ops.packed_volume_render(sigma_v, rgb_v, t0, t1, offsets, counts, background=bg_v,
                                             early_termination=0.0)
        return tf.concat([tf.reshape(out.rgb, [-1]), out.depth, out.opacity], 0)

    assert_compute_gradient(tf.test.compute_gradient(f, [sigma, rgb, bg], delta=1e-3), rtol=5e-3, atol=5e-3)


def test_intervals_and_layout_get_no_gradient():
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed([3, 2], seed=4)
    t0_v, t1_v = tf.constant(t0), tf.constant(t1)
    sigma_v = tf.constant(sigma)
    with tf.GradientTape() as tape:
        tape.watch([sigma_v, t0_v, t1_v])
        out = metal_ops.packed_volume_render(sigma_v, rgb, t0_v, t1_v, offsets, counts)
        loss = tf.reduce_sum(out.depth)
    g_sigma, g_t0, g_t1 = tape.gradient(loss, [sigma_v, t0_v, t1_v])
    assert g_t0 is None and g_t1 is None and g_sigma is not None


@pytest.mark.parametrize("counts", [[], [0, 0], [0, 4, 0]])
def test_gradients_of_empty_batches_and_empty_rays(counts):
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed(counts, seed=5)
    bg = np.full((len(counts), 3), 0.5, np.float32)
    sigma_v, rgb_v, bg_v = tf.constant(sigma), tf.constant(rgb), tf.constant(bg)
    with tf.GradientTape() as tape:
        tape.watch([sigma_v, rgb_v, bg_v])
        out = metal_ops.packed_volume_render(sigma_v, rgb_v, t0, t1, offsets, counts, background=bg_v,
                                             return_weights=True)
        loss = tf.reduce_sum(out.rgb) + tf.reduce_sum(out.weights)
    g_sigma, g_rgb, g_bg = tape.gradient(loss, [sigma_v, rgb_v, bg_v])
    assert g_sigma.shape == sigma.shape and g_rgb.shape == rgb.shape and g_bg.shape == bg.shape
    n_sigma, n_rgb, n_bg = ref.numeric_grads(sigma, rgb, t0, t1, offsets, counts, bg, 1e-4,
                                             (np.ones((len(counts), 3)), np.zeros(len(counts)),
                                              np.zeros(len(counts)), np.ones(len(sigma))))
    np.testing.assert_allclose(g_sigma.numpy(), n_sigma, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(g_bg.numpy(), n_bg, rtol=2e-4, atol=2e-4)


# ---- bad inputs ---------------------------------------------------------------------


def packed(counts=(3, 2, 4), seed=0):
    return [np.array(a) for a in ref.make_packed(list(counts), seed=seed)]


def break_layout(case, offsets, counts):
    """The layout of make_packed([3, 2, 4]) (offsets [0, 3, 5]) broken in place as `case` says."""
    if case == "negative_count":
        counts[1] = -1
    elif case == "offset_not_prefix_sum":
        offsets[2] = 4
    elif case == "offsets_not_monotone":
        offsets[1] = 0
    elif case == "first_offset":
        offsets[0] = 1
    elif case == "past_end":
        counts[2] = 5
    else:
        assert case == "short_total", case
        counts[2] = 3


def render_raw(p, background=None):
    bg = np.zeros(3, np.float32) if background is None else background
    return load_library().metal_ops_packed_volume_render(*p, bg, return_weights=True)


@pytest.mark.parametrize("case,pattern", [
    ("negative_count", r"'ray_counts' must be >= 0: ray 1 has count -1"),
    ("offset_not_prefix_sum", r"'ray_offsets' must be the exclusive prefix sum of 'ray_counts'.*ray 2 has offset 4, "
                              r"expected 5"),
    ("offsets_not_monotone", r"'ray_offsets' must be the exclusive prefix sum.*ray 1 has offset 0, expected 3"),
    ("first_offset", r"'ray_offsets'.*ray 0 has offset 1, expected 0"),
    ("past_end", r"ray 2's samples \[5, 10\) run past the 9 samples of 'sigma'"),
    ("short_total", r"'ray_counts' sum to 8 but 'sigma' has 9 samples"),
])
def test_bad_layout_names_the_argument_and_ray(case, pattern):
    p = packed()
    offsets, counts = p[4], p[5]
    break_layout(case, offsets, counts)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        metal_ops.packed_volume_render(*p)
    # The backward checks the layout too (it is callable on its own).
    R, N = len(counts), len(p[0])
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    with pytest.raises(tf.errors.InvalidArgumentError, match="MetalOpsPackedVolumeRenderGrad: " + pattern):
        load_library().metal_ops_packed_volume_render_grad(*p, z(3), z(R, 3), z(R), z(R), z(0), z(R, 3), z(R), z(R),
                                                           z(0))


def test_negative_and_nan_sigma_name_sigma_sample_and_ray():
    p = packed()
    p[0][4] = -1.0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'sigma' must be non-negative.*sample 4 \(ray 1\)"):
        metal_ops.packed_volume_render(*p)
    p[0][4] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'sigma'.*sample 4 \(ray 1\) has sigma = nan"):
        metal_ops.packed_volume_render(*p)


def render_and_grads(p, jit=False, **kw):
    """Outputs and (sigma, rgb) gradients of a weighted sum of them, in one call (jit: under XLA)."""
    sigma, rgb = tf.constant(p[0]), tf.constant(p[1])

    def run(sigma, rgb):
        with tf.GradientTape() as tape:
            tape.watch([sigma, rgb])
            out = metal_ops.packed_volume_render(sigma, rgb, *p[2:], return_weights=True, **kw)
            loss = tf.reduce_sum(out.rgb) + 0.5 * tf.reduce_sum(out.depth) + tf.reduce_sum(out.weights)
        return [out.rgb, out.depth, out.opacity, out.weights, *tape.gradient(loss, [sigma, rgb])]

    fn = tf.function(run, jit_compile=True) if jit else run
    return [np.asarray(v) for v in fn(sigma, rgb)]


@pytest.mark.parametrize("jit", [False, True], ids=["kernel", "xla"])
def test_without_validate_invalid_rays_render_nan_and_nothing_is_raised(jit):
    if jit and sys.platform == "darwin":
        pytest.skip("Metal has no XLA")
    p = packed()
    want = render_and_grads(p, jit)
    # valid input: the same results either way
    for a, b in zip(render_and_grads(p, jit, validate=False), want):
        np.testing.assert_array_equal(a, b)
    # negative sigma in ray 1 (samples 3-4): ray 1 is NaN, rays 0 and 2 as with valid input
    p[0][4] = -1.0
    rgb, depth, opacity, weights, _, _ = render_and_grads(p, jit, validate=False)
    assert np.isnan(rgb[1]).all() and np.isnan(depth[1]) and np.isnan(opacity[1])
    for got, w in ((rgb, want[0]), (depth, want[1]), (opacity, want[2])):
        np.testing.assert_array_equal(got[[0, 2]], w[[0, 2]])
    np.testing.assert_array_equal(weights[[0, 1, 2, 5, 6, 7, 8]], want[3][[0, 1, 2, 5, 6, 7, 8]])
    # a broken layout (ray 1's count -1): no error, NaN for the rays it breaks
    p = packed()
    break_layout("negative_count", p[4], p[5])
    rgb = render_and_grads(p, jit, validate=False)[0]
    assert np.isnan(rgb[1]).all()
    with pytest.raises(tf.errors.InvalidArgumentError, match="'ray_counts' must be >= 0"):
        render_and_grads(p, jit)


def test_reversed_interval_names_t_ends_sample_and_ray():
    p = packed()
    p[3][6] = p[2][6] - 0.5
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'t_ends' must be >= 't_starts'.*sample 6 \(ray 2\)"):
        metal_ops.packed_volume_render(*p)


@pytest.mark.parametrize("case,pattern", [
    ("sigma_rank", r"'sigma' must be \[N\]|rank"),
    ("rgb", r"'rgb' must be \[N, 3\]|Dimension"),
    ("t_starts", r"'t_starts' must be \[N\]|Dimension"),
    ("t_ends", r"'t_ends' must be \[N\]|Dimension"),
    ("counts", r"'ray_counts' must be \[R\]|Dimension"),
    ("background", r"'background' must be \[3\] or \[R, 3\]|Dimension"),
    ("no_rays", r"'ray_counts' sum to 0 \(no rays\) but 'sigma' has 9 samples"),
])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_shape_mismatch_names_the_argument(case, pattern, mode):
    p = packed()
    bg = np.zeros(3, np.float32)
    if case == "sigma_rank":
        p[0] = p[0].reshape(3, 3)
    elif case == "rgb":
        p[1] = p[1][:-1]
    elif case == "t_starts":
        p[2] = p[2][:-1]
    elif case == "t_ends":
        p[3] = p[3][:-1]
    elif case == "counts":
        p[5] = p[5][:-1]
    elif case == "background":
        bg = np.zeros((2, 3), np.float32)
    elif case == "no_rays":
        p[4] = p[4][:0]
        p[5] = p[5][:0]
    if mode == "eager":
        run = render_raw
    else:
        # Unknown static shapes: the kernel's own check and message.
        specs = [tf.TensorSpec(None, tf.float32)] * 4 + [tf.TensorSpec(None, tf.int32)] * 2
        run = tf.function(lambda *a: load_library().metal_ops_packed_volume_render(*a, return_weights=True),
                          input_signature=specs + [tf.TensorSpec(None, tf.float32)])
        run = (lambda run: lambda p, bg: run(*p, bg))(run)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=pattern):
        run(p, bg)


def test_offsets_must_be_int32():
    p = packed()
    with pytest.raises(TypeError, match="'ray_offsets' must be int32"):
        metal_ops.packed_volume_render(p[0], p[1], p[2], p[3], p[4].astype(np.int64), p[5])


def test_grad_op_rejects_mismatched_weights():
    p = packed()
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'weights' and 'grad_weights' must both be \[N\]"):
        load_library().metal_ops_packed_volume_render_grad(*p, z(3), z(3, 3), z(3), z(3), z(9), z(3, 3), z(3), z(3),
                                                           z(0))


def test_shape_function():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None, 3], tf.float32),
                                  tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32),
                                  tf.TensorSpec([5], tf.int32), tf.TensorSpec([None], tf.int32)])
    def f(sigma, rgb, t0, t1, offsets, counts):
        out = metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, return_weights=True)
        assert out.rgb.shape.as_list() == [5, 3]
        assert out.depth.shape.as_list() == [5]
        assert out.weights.shape.as_list() == [None]
        no_weights = load_library().metal_ops_packed_volume_render(sigma, rgb, t0, t1, offsets, counts,
                                                                   tf.zeros([3]))
        assert no_weights[3].shape.as_list() == [0]
        return out.rgb

    f.get_concrete_function()


# ---- RayMarch end to end ------------------------------------------------------------


def test_ray_march_output_renders_like_the_reference_and_trains():
    rng = np.random.default_rng(11)
    R, G = 64, 8
    origins = rng.uniform(-2, 2, size=(R, 3)).astype(np.float32)
    origins[:, 2] = -3.0
    directions = np.tile(np.array([0, 0, 1], np.float32), (R, 1)) + rng.normal(0, 0.1, size=(R, 3)).astype(np.float32)
    occ = rng.random((G, G, G)) < 0.4
    occupancy = metal_ops.pack_occupancy(occ[None])
    samples = metal_ops.ray_march(origins, directions, np.zeros(R, np.float32), np.full(R, 10.0, np.float32),
                                  occupancy, aabb=[-1, -1, -1, 1, 1, 1], grid_resolution=G, step_size=0.05)
    N = int(samples.t_starts.shape[0])
    assert N > 0 and np.count_nonzero(samples.ray_counts.numpy() == 0) > 0
    mid = 0.5 * (samples.t_starts + samples.t_ends)
    points = tf.gather(origins, samples.ray_indices) + tf.gather(directions, samples.ray_indices) * mid[:, None]
    sigma_v = tf.Variable(rng.uniform(0, 5, size=N).astype(np.float32))
    with tf.GradientTape() as tape:
        colour = tf.sigmoid(points)
        out = metal_ops.packed_volume_render(sigma_v, colour, samples.t_starts, samples.t_ends, samples.ray_offsets,
                                             samples.ray_counts, background=[1.0, 1.0, 1.0], return_weights=True)
        loss = tf.reduce_mean((out.rgb - 0.5) ** 2)
    want = ref.render(sigma_v.numpy(), colour.numpy(), samples.t_starts.numpy(), samples.t_ends.numpy(),
                      samples.ray_offsets.numpy(), samples.ray_counts.numpy(), np.ones(3), 1e-4)
    for got, w in zip(out, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-5)
    g = tape.gradient(loss, sigma_v)
    assert g is not None and np.all(np.isfinite(g.numpy()))
    # Each sample's ray from ray_indices agrees with the layout the op was given.
    np.testing.assert_array_equal(np.repeat(np.arange(R), samples.ray_counts.numpy()), samples.ray_indices.numpy())


# ---- Metal shaders on the MSL shim ----------------------------------------------------


def shim_forward(lib, p, bg, eps, write_weights, grid, fill=-7.0):
    sigma, rgb, t0, t1, offsets, counts = p
    R, N = len(counts), len(sigma)
    out_rgb = np.full((R, 3), fill, np.float32)
    depth = np.full(R, fill, np.float32)
    opacity = np.full(R, fill, np.float32)
    weights = np.zeros(max(N, 1), np.float32)  # the Metal glue zero-fills the weights first
    lib.shim_packed_volume_render_forward_float32(
        ptr(sigma), ptr(rgb), ptr(t0), ptr(t1), ptr(np.ascontiguousarray(offsets, np.int32)),
        ptr(np.ascontiguousarray(counts, np.int32)), ptr(bg), ptr(out_rgb), ptr(depth), ptr(opacity), ptr(weights),
        i64(R), i64(N), f32(eps), ctypes.c_int32(bg.ndim == 2), ctypes.c_int32(write_weights), u32(grid))
    return out_rgb, depth, opacity, weights[:N]


@pytest.mark.parametrize("counts,grid", [("one", 1), ("mixed", 4), ("all_empty", 2), ("equal", 64), ("random", 7)])
@pytest.mark.parametrize("bg_kind", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_metal_forward_shader_on_msl_shim(counts, grid, bg_kind, eps):
    lib = load_shim()
    p = packed_with_margin(COUNTS[counts], eps)
    bg = make_background(bg_kind, len(p[5]), np.float32)
    got = shim_forward(lib, p, bg, eps, True, grid)
    want = ref.render(*p, bg, eps)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[np.float32])


def test_metal_forward_shader_marks_invalid_rays_with_nan():
    lib = load_shim()
    p = packed((3, 2, 4, 2))
    p[0][4] = -1.0  # ray 1: a bad sample
    p[5][3] = 5  # ray 3: runs past N
    out_rgb, depth, opacity, weights = shim_forward(lib, p, np.zeros(3, np.float32), 1e-4, True, 3)
    assert np.isnan(out_rgb[[1, 3]]).all() and np.isnan(depth[[1, 3]]).all() and np.isnan(opacity[[1, 3]]).all()
    assert np.isfinite(out_rgb[[0, 2]]).all()
    assert np.isnan(weights[3:5]).all() and np.all(weights[9:] == 0.0)


@pytest.mark.parametrize("bg_kind", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-2])
@pytest.mark.parametrize("with_weights", [False, True])
def test_metal_backward_shader_on_msl_shim(bg_kind, eps, with_weights):
    lib = load_shim()
    counts = [4, 0, 6, 1, 5, 3]
    p = packed_with_margin(counts, eps, sigma_scale=1.5)
    R, N = len(counts), len(p[0])
    bg = make_background(bg_kind, R, np.float32)
    out_rgb, depth, opacity, weights = shim_forward(lib, p, bg, eps, True, 2)
    cot = cotangents(R, N, np.float32, with_weights)
    g_w = cot[3] if with_weights else np.zeros(N, np.float32)
    grad_sigma = np.zeros(N, np.float32)
    grad_rgb = np.zeros((N, 3), np.float32)
    grad_bg = np.full((R, 3), -7.0, np.float32)
    sigma, rgb, t0, t1, offsets, cnt = p
    lib.shim_packed_volume_render_backward_float32(
        ptr(sigma), ptr(rgb), ptr(t0), ptr(t1), ptr(np.ascontiguousarray(offsets, np.int32)),
        ptr(np.ascontiguousarray(cnt, np.int32)), ptr(bg), ptr(out_rgb), ptr(depth), ptr(opacity),
        ptr(np.ascontiguousarray(weights)), ptr(cot[0]), ptr(cot[1]), ptr(cot[2]), ptr(np.ascontiguousarray(g_w)),
        ptr(grad_sigma), ptr(grad_rgb), ptr(grad_bg), i64(R), i64(N), f32(eps), ctypes.c_int32(bg.ndim == 2),
        ctypes.c_int32(with_weights), u32(3))
    n_sigma, n_rgb, n_bg = ref.numeric_grads(*p, bg, eps, cot)
    np.testing.assert_allclose(grad_sigma, n_sigma, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(grad_rgb, n_rgb, rtol=2e-4, atol=2e-4)
    got_bg = grad_bg.sum(0) if bg.ndim == 1 else grad_bg
    np.testing.assert_allclose(got_bg, n_bg, rtol=2e-4, atol=2e-4)


# ---- packed distortion loss -----------------------------------------------------------


@pytest.mark.parametrize("counts", ["one", "mixed", "all_empty", "random", "no_rays"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_packed_distortion_loss_matches_double_sum(counts, mode):
    _, _, t0, t1, offsets, cnt = ref.make_packed(COUNTS[counts], seed=8)
    w = np.random.default_rng(9).uniform(0, 1, size=len(t0)).astype(np.float32)
    args = [tf.constant(a) for a in (w, t0, t1, offsets, cnt)]
    fn = metal_ops.packed_distortion_loss
    if mode == "function":
        fn = tf.function(fn, input_signature=[tf.TensorSpec([None], tf.float32)] * 3
                         + [tf.TensorSpec([None], tf.int32)] * 2)
    with tf.GradientTape() as tape:
        tape.watch(args[:3])
        loss = fn(*args)
        total = tf.reduce_sum(loss * np.arange(1, len(cnt) + 1, dtype=np.float32))
    grads = tape.gradient(total, args[:3])
    want, dw, d0, d1 = distortion_ref.packed_reference(w, t0, t1, offsets, cnt)
    assert loss.shape == (len(cnt),)
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-4, atol=1e-5)
    scale = np.repeat(np.arange(1, len(cnt) + 1), cnt)
    for g, want_g in zip(grads, (dw, d0, d1)):
        got = np.zeros(len(w)) if g is None else tf.convert_to_tensor(g).numpy()
        np.testing.assert_allclose(got, scale * want_g, rtol=1e-4, atol=1e-4)


def test_packed_distortion_loss_equals_fixed_s_on_contiguous_samples():
    rng = np.random.default_rng(10)
    R, S = 6, 11
    t = np.sort(rng.uniform(2, 6, size=(R, S + 1)), axis=1).astype(np.float32)
    w = rng.uniform(0, 1, size=(R, S)).astype(np.float32)
    fixed = metal_ops.distortion_loss(w, t)
    packed_loss = metal_ops.packed_distortion_loss(w.reshape(-1), t[:, :-1].reshape(-1), t[:, 1:].reshape(-1),
                                                   np.arange(R, dtype=np.int32) * S, np.full(R, S, np.int32))
    np.testing.assert_allclose(packed_loss.numpy(), fixed.numpy(), rtol=1e-5, atol=1e-6)


def test_packed_distortion_loss_of_packed_render_weights_trains_sigma():
    sigma, rgb, t0, t1, offsets, counts = ref.make_packed([5, 0, 9, 3], seed=12)
    sigma_v = tf.Variable(sigma)
    with tf.GradientTape() as tape:
        out = metal_ops.packed_volume_render(sigma_v, rgb, t0, t1, offsets, counts, return_weights=True)
        loss = tf.reduce_sum(metal_ops.packed_distortion_loss(out.weights, t0, t1, offsets, counts))
    g = tape.gradient(loss, sigma_v).numpy()
    assert np.all(np.isfinite(g)) and np.any(g != 0)


@pytest.mark.parametrize("case,pattern", [
    ("negative_count", "'ray_counts' must be >= 0"),
    ("offset_not_prefix_sum", "'ray_offsets' must be the exclusive prefix sum"),
    ("short_total", "'ray_counts' must sum to N"),
    ("t_ends", "'t_ends' must be \\[N\\]"),
])
def test_packed_distortion_loss_bad_layout_names_the_argument(case, pattern):
    _, _, t0, t1, offsets, counts = packed(seed=1)
    w = np.ones(len(t0), np.float32)
    if case == "t_ends":
        t1 = t1[:-1]
    else:
        break_layout(case, offsets, counts)
    if case == "short_total":  # offsets consistent with the counts: only their sum is off
        offsets = np.cumsum(counts).astype(np.int32) - counts
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=pattern):
        metal_ops.packed_distortion_loss(w, t0, t1, offsets, counts)
    with pytest.raises(TypeError, match="'ray_counts' must be int32"):
        metal_ops.packed_distortion_loss(w, t0, t1, offsets, counts.astype(np.int64))
