"""VolumeRender: CPU kernels vs a NumPy float64 reference, gradients (finite
differences of the reference and tf.test.compute_gradient), early termination,
bad inputs, shape inference, and the Metal shaders through the MSL shim."""
import ctypes
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops._loader import load_library
from tests.reference import volume_render as ref
from tests.reference.render_testing import (GRADIENT_GRID, assert_compute_gradient, assert_grads_close, cotangents,
                                            make_background, render_grads)
from tests.metal_shim.shim import f32, i64, load_shim, ptr, u32

pytestmark = pytest.mark.every_device

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-11)}


def rays_with_margin(R, S, eps, dtype=np.float32, surface=False, seed=0, sigma_scale=2.0):
    """make_rays with a seed whose transmittances stay clear of the threshold."""
    for s in range(seed, seed + 200):
        sigma, rgb, t = ref.make_rays(R, S, seed=s, dtype=dtype, surface=surface, sigma_scale=sigma_scale)
        if ref.margin_ok(sigma, t, eps):
            return sigma, rgb, t
    raise AssertionError("no seed gives a margin around the early-termination threshold")


# ---- forward ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("R,S", [(1, 1), (4, 7), (33, 64), (3, 0), (0, 5)])
@pytest.mark.parametrize("bg", ["none", "shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-4, 0.3])
def test_forward_matches_reference(dtype, R, S, bg, eps):
    sigma, rgb, t = rays_with_margin(R, S, eps, dtype, surface=True)
    background = make_background(bg, R, dtype)
    out = metal_ops.volume_render(sigma, rgb, t, background=background, early_termination=eps, return_weights=True)
    e_rgb, e_depth, e_opacity, e_weights = ref.render(sigma, rgb, t, background, eps)
    for got, want in zip(out, (e_rgb, e_depth, e_opacity, e_weights)):
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, **TOL[dtype])


@pytest.mark.parametrize("bg", ["none", "shared", "per_ray"])
def test_forward_in_tf_function_matches_eager(bg):
    sigma, rgb, t = rays_with_margin(9, 16, 1e-4, surface=True)
    background = make_background(bg, 9, np.float32)
    eager = metal_ops.volume_render(sigma, rgb, t, background=background)
    graph = tf.function(lambda *a: metal_ops.volume_render(*a, background=background))(sigma, rgb, t)
    assert eager.weights is None and graph.weights is None
    for a, b in zip(eager[:3], graph[:3]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    e_rgb, e_depth, e_opacity, _ = ref.render(sigma, rgb, t, background, 1e-4)
    np.testing.assert_allclose(graph.rgb.numpy(), e_rgb, **TOL[np.float32])
    np.testing.assert_allclose(graph.depth.numpy(), e_depth, **TOL[np.float32])
    np.testing.assert_allclose(graph.opacity.numpy(), e_opacity, **TOL[np.float32])


def test_batch_of_4096_rays_uses_threads_and_matches_reference():
    sigma, rgb, t = ref.make_rays(4096, 64, seed=5, surface=True)
    background = np.array([0.2, 0.5, 0.9], np.float32)
    out = metal_ops.volume_render(sigma, rgb, t, background=background, early_termination=0.0, return_weights=True)
    want = ref.render(sigma, rgb, t, background, 0.0)
    for got, w in zip(out, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=5e-5, atol=5e-5)


def test_output_namedtuple_and_weights_only_when_asked():
    sigma, rgb, t = ref.make_rays(2, 3)
    out = metal_ops.volume_render(sigma, rgb, t)
    assert isinstance(out, metal_ops.VolumeRenderOutput)
    assert out._fields == ("rgb", "depth", "opacity", "weights")
    assert out.weights is None
    assert metal_ops.volume_render(sigma, rgb, t, return_weights=True).weights.shape == (2, 3)


def test_python_lists_and_ints_are_accepted():
    out = metal_ops.volume_render([[1.0, 0.0]], [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], [[2, 3, 4]])
    assert out.rgb.dtype == tf.float32
    w0 = 1 - np.exp(-1.0)
    np.testing.assert_allclose(out.rgb.numpy(), [[w0, 0.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(out.depth.numpy(), [w0 * 2.5], rtol=1e-6)


def test_opaque_first_sample_and_empty_space():
    # An (almost) opaque first sample hides everything behind it; empty space
    # shows the background.
    sigma = np.array([[1e4, 5.0, 5.0], [0.0, 0.0, 0.0]], np.float32)
    rgb = np.tile(np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], np.float32), (2, 1, 1))
    t = np.array([[2.0, 3.0, 4.0, 5.0]] * 2, np.float32)
    bg = np.array([0.1, 0.2, 0.3], np.float32)
    out = metal_ops.volume_render(sigma, rgb, t, background=bg, return_weights=True)
    np.testing.assert_allclose(out.rgb.numpy(), [[1.0, 0.0, 0.0], [0.1, 0.2, 0.3]], atol=1e-6)
    np.testing.assert_allclose(out.opacity.numpy(), [1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(out.depth.numpy(), [2.5, 0.0], atol=1e-5)
    np.testing.assert_array_equal(out.weights.numpy()[0, 1:], [0.0, 0.0])  # terminated early


# ---- early termination --------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-4, 1e-2])
def test_early_termination_skips_the_rest_of_the_ray(eps):
    sigma, rgb, t = rays_with_margin(64, 32, eps, surface=True)
    out = metal_ops.volume_render(sigma, rgb, t, early_termination=eps, return_weights=True)
    full = metal_ops.volume_render(sigma, rgb, t, early_termination=0.0, return_weights=True)
    w = out.weights.numpy()
    _, _, _, e_w = ref.render(sigma, rgb, t, None, eps)
    skipped = e_w == 0
    assert skipped.any(), "test data must trigger early termination"
    np.testing.assert_array_equal(w[skipped & (ref.render(sigma, rgb, t, None, 0.0)[3] > 0)], 0.0)
    # The skipped samples changed the result by less than the threshold.
    np.testing.assert_allclose(out.opacity.numpy(), full.opacity.numpy(), atol=eps * 1.01)
    assert np.all(out.opacity.numpy() <= full.opacity.numpy() + 1e-6)


def test_early_termination_gradient_is_zero_for_skipped_samples():
    eps = 1e-3
    sigma, rgb, t = rays_with_margin(16, 24, eps, surface=True)
    sigma_v, rgb_v = tf.constant(sigma), tf.constant(rgb)
    with tf.GradientTape() as tape:
        tape.watch([sigma_v, rgb_v])
        out = metal_ops.volume_render(sigma_v, rgb_v, t, early_termination=eps)
        loss = tf.reduce_sum(out.rgb) + tf.reduce_sum(out.depth) + tf.reduce_sum(out.opacity)
    g_sigma, g_rgb = tape.gradient(loss, [sigma_v, rgb_v])
    _, _, _, e_w = ref.render(sigma, rgb, t, None, eps)
    tau = sigma.astype(np.float64) * np.diff(t.astype(np.float64), axis=1)
    cum = np.concatenate([np.zeros((16, 1)), np.cumsum(tau, 1)[:, :-1]], 1)
    skipped = np.exp(-cum) < eps
    assert skipped.any()
    np.testing.assert_array_equal(g_sigma.numpy()[skipped], 0.0)
    np.testing.assert_array_equal(g_rgb.numpy()[skipped], 0.0)
    assert np.abs(g_sigma.numpy()[~skipped]).max() > 0


def test_early_termination_out_of_range_is_rejected():
    sigma, rgb, t = ref.make_rays(2, 3)
    # The op's check (kernels/volume_render/volume_render.h), through the wrapper, eagerly and in a graph.
    with pytest.raises(tf.errors.InvalidArgumentError, match="'early_termination' must be in \\[0, 1\\], got 1.5"):
        metal_ops.volume_render(sigma, rgb, t, early_termination=1.5)
    with pytest.raises(ValueError, match="'early_termination' must be in \\[0, 1\\], got 1.5"):
        tf.function(lambda: metal_ops.volume_render(sigma, rgb, t, early_termination=1.5)).get_concrete_function()
    with pytest.raises(tf.errors.InvalidArgumentError, match="'early_termination' must be in \\[0, 1\\]"):
        load_library().metal_ops_volume_render(sigma, rgb, t, np.zeros(3, np.float32), early_termination=-0.5)


# ---- gradients ----------------------------------------------------------------------


def op_grads(sigma, rgb, t, background, eps, cot, fn_mode="eager"):
    """Gradients of <cot, outputs> through the op (GradientTape)."""
    return render_grads(
        lambda s, c, b, with_weights: metal_ops.volume_render(s, c, t, background=b, early_termination=eps,
                                                              return_weights=with_weights),
        sigma, rgb, background, cot, fn_mode)


@GRADIENT_GRID
def test_gradients_match_finite_differences_of_reference(dtype, bg, eps, with_weights, mode):
    R, S = 3, 6
    sigma, rgb, t = rays_with_margin(R, S, eps, dtype, surface=True, sigma_scale=1.5)
    background = make_background(bg, R, dtype)
    cot = cotangents(R, (R, S), dtype, with_weights)
    g_sigma, g_rgb, g_bg = op_grads(sigma, rgb, t, background, eps, cot, mode)
    n_sigma, n_rgb, n_bg = ref.numeric_grads(sigma, rgb, t, background, eps, cot)
    assert_grads_close((g_sigma, g_rgb, g_bg), (n_sigma, n_rgb, n_bg), dtype, background)


@pytest.mark.parametrize("bg", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_compute_gradient_float64_all_outputs(bg, eps):
    R, S = 3, 5
    sigma, rgb, t = rays_with_margin(R, S, eps, np.float64, surface=True, sigma_scale=1.5)
    sigma = sigma + 0.05  # compute_gradient perturbs inputs; keep sigma > 0
    assert ref.margin_ok(sigma, t, eps)
    background = make_background(bg, R, np.float64)

    def f(sigma_v, rgb_v, bg_v):
        out = metal_ops.volume_render(sigma_v, rgb_v, t, background=bg_v, early_termination=eps,
                                      return_weights=True)
        return tf.concat([tf.reshape(out.rgb, [-1]), out.depth, out.opacity, tf.reshape(out.weights, [-1])], 0)

    assert_compute_gradient(tf.test.compute_gradient(f, [sigma, rgb, background], delta=1e-6), rtol=1e-6, atol=1e-7)


def test_compute_gradient_float32():
    sigma, rgb, t = ref.make_rays(2, 4, seed=3, sigma_scale=1.0)
    sigma = sigma + np.float32(0.1)
    bg = np.array([0.3, 0.6, 0.9], np.float32)

    def f(sigma_v, rgb_v, bg_v):
        out = metal_ops.volume_render(sigma_v, rgb_v, t, background=bg_v, early_termination=0.0)
        return tf.concat([tf.reshape(out.rgb, [-1]), out.depth, out.opacity], 0)

    assert_compute_gradient(tf.test.compute_gradient(f, [sigma, rgb, bg], delta=1e-3), rtol=5e-3, atol=5e-3)


def test_only_some_outputs_used_and_t_gets_no_gradient():
    sigma, rgb, t = ref.make_rays(4, 5, seed=4)
    sigma_v, rgb_v, t_v = tf.constant(sigma), tf.constant(rgb), tf.constant(t)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([sigma_v, rgb_v, t_v])
        out = metal_ops.volume_render(sigma_v, rgb_v, t_v, return_weights=True)
        depth_loss = tf.reduce_sum(out.depth)
    g_sigma, g_rgb, g_t = tape.gradient(depth_loss, [sigma_v, rgb_v, t_v])
    assert g_t is None
    np.testing.assert_array_equal(g_rgb.numpy(), 0.0)  # depth does not depend on colours
    cot = (np.zeros((4, 3)), np.ones(4), np.zeros(4), None)
    n_sigma, _, _ = ref.numeric_grads(sigma, rgb, t, None, 1e-4, cot)
    np.testing.assert_allclose(g_sigma.numpy(), n_sigma, rtol=2e-4, atol=2e-4)


def test_gradients_of_empty_batches():
    for R, S in [(0, 4), (3, 0)]:
        sigma, rgb, t = ref.make_rays(R, S)
        bg = np.full((R, 3), 0.5, np.float32)
        sigma_v, rgb_v, bg_v = tf.constant(sigma), tf.constant(rgb), tf.constant(bg)
        with tf.GradientTape() as tape:
            tape.watch([sigma_v, rgb_v, bg_v])
            out = metal_ops.volume_render(sigma_v, rgb_v, t, background=bg_v)
            loss = tf.reduce_sum(out.rgb)
        g = tape.gradient(loss, [sigma_v, rgb_v, bg_v])
        assert [x.shape for x in g] == [sigma.shape, rgb.shape, bg.shape]
        np.testing.assert_array_equal(g[2].numpy(), np.ones((R, 3)))  # opacity 0: background passes through
        if R:
            np.testing.assert_array_equal(out.rgb.numpy(), bg)


# ---- bad inputs -------------------------------------------------------------------------


@pytest.mark.not_on_metal("Metal kernels do not check values: they give NaN (docs/METAL_COMPAT.md)")
def test_negative_sigma_names_sigma_and_ray():
    sigma, rgb, t = ref.make_rays(5, 6)
    sigma[3, 4] = -0.25
    sigma[4, 1] = -1.0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'sigma' must be non-negative.*ray 3, sample 4 has sigma = -0.25"):
        metal_ops.volume_render(sigma, rgb, t)


@pytest.mark.parametrize("jit", [False, True], ids=["kernel", "xla"])
def test_without_validate_invalid_rays_render_nan_and_nothing_is_raised(jit):
    if jit and sys.platform == "darwin":
        pytest.skip("Metal has no XLA")
    sigma, rgb, t = ref.make_rays(5, 6)

    def run(sigma, **kw):
        with tf.GradientTape() as tape:
            tape.watch(sigma)
            out = metal_ops.volume_render(sigma, rgb, t, return_weights=True, **kw)
            loss = tf.reduce_sum(out.rgb) + tf.reduce_sum(out.weights)
        return [out.rgb, out.depth, out.opacity, out.weights, tape.gradient(loss, sigma)]

    fn = tf.function(run, jit_compile=True) if jit else run
    want = [np.asarray(v) for v in fn(tf.constant(sigma))]
    for a, b in zip([np.asarray(v) for v in fn(tf.constant(sigma), validate=False)], want):
        np.testing.assert_array_equal(a, b)
    sigma[3, 4] = -0.25
    got = [np.asarray(v) for v in fn(tf.constant(sigma), validate=False)]
    assert np.isnan(got[0][3]).all() and np.isnan(got[1][3]) and np.isnan(got[2][3])
    for g, w in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(np.delete(g, 3, axis=0), np.delete(w, 3, axis=0))


@pytest.mark.not_on_metal("Metal kernels do not check values: they give NaN (docs/METAL_COMPAT.md)")
def test_nan_sigma_is_rejected():
    sigma, rgb, t = ref.make_rays(3, 4)
    sigma[1, 2] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'sigma'.*ray 1, sample 2"):
        metal_ops.volume_render(sigma, rgb, t)


@pytest.mark.not_on_metal("Metal kernels do not check values: they give NaN (docs/METAL_COMPAT.md)")
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_decreasing_t_names_t_and_ray(mode):
    sigma, rgb, t = ref.make_rays(4, 5)
    t[2, 3] = t[2, 4] + 0.5
    fn = metal_ops.volume_render if mode == "eager" else tf.function(metal_ops.volume_render)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'t' must be non-decreasing.*ray 2 has t\[4\]"):
        fn(sigma, rgb, t)


@pytest.mark.parametrize(
    "case,pattern",
    [
        ("sigma_rank", r"'sigma' must be \[R, S\]"),
        ("rgb_channels", r"'rgb' must be \[R, S, 3\]"),
        ("rgb_samples", r"'rgb' must be \[R, S, 3\]"),
        ("t_samples", r"'t' must be \[R, S \+ 1\]"),
        ("t_rays", r"'t' must be \[R, S \+ 1\]"),
        ("background_size", r"'background' must be \[3\] or \[R, 3\]"),
        ("background_rays", r"'background' must be \[3\] or \[R, 3\]"),
    ],
)
def test_shape_mismatch_names_the_argument(case, pattern):
    sigma, rgb, t = ref.make_rays(4, 5)
    bg = np.zeros(3, np.float32)
    if case == "sigma_rank":
        sigma = sigma[..., None]
    elif case == "rgb_channels":
        rgb = np.concatenate([rgb, rgb[..., :1]], -1)
    elif case == "rgb_samples":
        rgb = rgb[:, :4]
    elif case == "t_samples":
        t = t[:, :5]
    elif case == "t_rays":
        t = t[:3]
    elif case == "background_size":
        bg = np.zeros(4, np.float32)
    elif case == "background_rays":
        bg = np.zeros((3, 3), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        metal_ops.volume_render(sigma, rgb, t, background=bg)
    # In a graph the shape function rejects the same inputs at trace time.
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        tf.function(lambda a, b, c, d: metal_ops.volume_render(a, b, c, background=d))(sigma, rgb, t, bg)


def test_grad_op_rejects_mismatched_weights():
    sigma, rgb, t = ref.make_rays(2, 3)
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    with pytest.raises(tf.errors.InvalidArgumentError, match="'weights' and 'grad_weights'"):
        load_library().metal_ops_volume_render_grad(
            sigma, rgb, t, z(3), z(2, 3), z(2), z(2), z(2, 3), z(2, 3), z(2), z(2), z(2, 2))


# ---- shape inference ------------------------------------------------------------------


def test_shape_function():
    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32), tf.TensorSpec([None, None, 3], tf.float32),
                                  tf.TensorSpec([None, None], tf.float32)])
    def f(sigma, rgb, t):
        out = metal_ops.volume_render(sigma, rgb, t, return_weights=True)
        assert out.rgb.shape.as_list() == [None, 3]
        assert out.depth.shape.as_list() == [None]
        assert out.opacity.shape.as_list() == [None]
        assert out.weights.shape.as_list() == [None, 8]
        plain = load_library().metal_ops_volume_render(sigma, rgb, t, tf.zeros([3]))
        assert plain[3].shape.as_list() == [None, 0]
        return out.rgb

    f.get_concrete_function()

    @tf.function(input_signature=[tf.TensorSpec([5, None], tf.float32), tf.TensorSpec(None, tf.float32),
                                  tf.TensorSpec([None, 9], tf.float32)])
    def g(sigma, rgb, t):
        out = metal_ops.volume_render(sigma, rgb, t, return_weights=True)
        assert out.rgb.shape.as_list() == [5, 3]
        assert out.weights.shape.as_list() == [5, 8]  # S inferred from t: 9 - 1
        return out.rgb

    g.get_concrete_function()


# ---- Metal shaders on the MSL shim ----------------------------------------------------


def shim_forward(lib, sigma, rgb, t, bg, eps, write_weights, grid):
    R, S = sigma.shape
    out_rgb = np.full((R, 3), -7.0, np.float32)
    depth = np.full(R, -7.0, np.float32)
    opacity = np.full(R, -7.0, np.float32)
    weights = np.full((R, max(S, 1)), -7.0, np.float32)
    lib.shim_volume_render_forward_float32(
        ptr(sigma), ptr(rgb), ptr(t), ptr(bg), ptr(out_rgb), ptr(depth), ptr(opacity), ptr(weights), i64(R), i64(S),
        f32(eps), ctypes.c_int32(bg.ndim == 2), ctypes.c_int32(write_weights), u32(grid))
    return out_rgb, depth, opacity, weights[:, :S]


@pytest.mark.parametrize("R,S,grid", [(1, 1, 1), (7, 9, 3), (64, 32, 64), (100, 17, 256), (5, 0, 4)])
@pytest.mark.parametrize("bg_kind", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_metal_forward_shader_on_msl_shim(R, S, grid, bg_kind, eps):
    lib = load_shim()
    sigma, rgb, t = rays_with_margin(R, S, eps, surface=True)
    bg = make_background(bg_kind, R, np.float32)
    out_rgb, depth, opacity, weights = shim_forward(lib, sigma, rgb, t, bg, eps, True, grid)
    want = ref.render(sigma, rgb, t, bg, eps)
    for got, w in zip((out_rgb, depth, opacity, weights), want):
        np.testing.assert_allclose(got, w, **TOL[np.float32])


def test_metal_forward_shader_marks_invalid_rays_with_nan():
    lib = load_shim()
    sigma, rgb, t = ref.make_rays(4, 5)
    sigma[1, 2] = -1.0
    t[3, 4] = t[3, 5] + 1.0
    out_rgb, depth, opacity, _ = shim_forward(lib, sigma, rgb, t, np.zeros(3, np.float32), 1e-4, True, 4)
    assert np.isnan(out_rgb[[1, 3]]).all() and np.isnan(depth[[1, 3]]).all() and np.isnan(opacity[[1, 3]]).all()
    assert np.isfinite(out_rgb[[0, 2]]).all()


@pytest.mark.parametrize("bg_kind", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-2])
@pytest.mark.parametrize("with_weights", [False, True])
def test_metal_backward_shader_on_msl_shim(bg_kind, eps, with_weights):
    lib = load_shim()
    R, S, grid = 5, 7, 3
    sigma, rgb, t = rays_with_margin(R, S, eps, surface=True, sigma_scale=1.5)
    bg = make_background(bg_kind, R, np.float32)
    out_rgb, depth, opacity, weights = shim_forward(lib, sigma, rgb, t, bg, eps, True, grid)
    cot = cotangents(R, (R, S), np.float32, with_weights)
    g_w = cot[3] if with_weights else np.zeros((R, S), np.float32)
    grad_sigma = np.full((R, S), -7.0, np.float32)
    grad_rgb = np.full((R, S, 3), -7.0, np.float32)
    grad_bg = np.full((R, 3), -7.0, np.float32)
    lib.shim_volume_render_backward_float32(
        ptr(sigma), ptr(rgb), ptr(t), ptr(bg), ptr(out_rgb), ptr(depth), ptr(opacity), ptr(weights),
        ptr(cot[0]), ptr(cot[1]), ptr(cot[2]), ptr(np.ascontiguousarray(g_w)), ptr(grad_sigma), ptr(grad_rgb),
        ptr(grad_bg), i64(R), i64(S), f32(eps), ctypes.c_int32(bg.ndim == 2), ctypes.c_int32(with_weights), u32(grid))
    n_sigma, n_rgb, n_bg = ref.numeric_grads(sigma, rgb, t, bg, eps, cot)
    np.testing.assert_allclose(grad_sigma, n_sigma, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(grad_rgb, n_rgb, rtol=2e-4, atol=2e-4)
    got_bg = grad_bg.sum(0) if bg.ndim == 1 else grad_bg
    np.testing.assert_allclose(got_bg, n_bg, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weights_keep_relative_accuracy_for_tiny_and_mid_optical_depths(dtype):
    # alpha = -expm1(-tau) must not cancel for tiny tau (1 - exp(-tau) would
    # lose all digits at tau = 1e-8 in float32); also around the 1/2 switch of
    # the CPU's float expm1 and for large tau.
    taus = np.array([1e-8, 3e-7, 1e-5, 1e-3, 0.1, 0.4999, 0.5, 0.5001, 2.0, 9.0])
    S = taus.size
    sigma = np.zeros((S, S), dtype)
    np.fill_diagonal(sigma, taus)  # ray k: only sample k absorbs
    t = np.tile(np.arange(S + 1, dtype=dtype), (S, 1))
    rgb = np.ones((S, S, 3), dtype)
    out = metal_ops.volume_render(sigma, rgb, t, early_termination=0.0, return_weights=True)
    got = np.diag(out.weights.numpy())
    want = -np.expm1(-taus)
    np.testing.assert_allclose(got, want, rtol=4e-7 if dtype == np.float32 else 1e-14)


def test_other_dtypes_are_refused_and_python_data_is_float32():
    """The dtype rule (README "Dtypes"): sigma float32 or float64, the other
    arguments of sigma's dtype; Python lists become float32."""
    sigma, rgb, t = ref.make_rays(3, 4, seed=8)
    with pytest.raises(TypeError, match="'sigma' must be float32 or float64, got float16"):
        metal_ops.volume_render(tf.constant(sigma.astype(np.float16)), rgb, t)
    with pytest.raises(TypeError, match=r"'t' must be float32 \(the dtype of 'sigma'\), got int32"):
        metal_ops.volume_render(sigma, rgb, tf.constant(np.tile(np.arange(2, 7, dtype=np.int32), (3, 1))))
    out = metal_ops.volume_render(sigma.tolist(), rgb.tolist(), np.tile(np.arange(2.0, 7.0), (3, 1)).tolist())
    assert out.rgb.dtype == tf.float32
    want = ref.render(sigma, rgb, np.tile(np.arange(2, 7), (3, 1)), None, 1e-4)[0]
    np.testing.assert_allclose(out.rgb.numpy(), want, rtol=1e-5, atol=1e-5)
