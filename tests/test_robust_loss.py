"""RobustLoss (Barron, CVPR 2019): CPU kernels vs closed forms and mpmath,
gradients, broadcasting, dtypes, edge cases, bad inputs, and the Metal shaders
through the MSL shim."""

import mpmath
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.metal_shim.shim import i64, load_shim, ptr, u32
from tests.reference.robust_loss import closed_form, mp_grads, mp_rho

pytestmark = pytest.mark.every_device

mpmath.mp.dps = 50
INF = float("inf")


def op_with_grads(x, alpha, scale, dtype=tf.float32):
    x = tf.constant(x, dtype)
    alpha = tf.constant(alpha, tf.float32)
    scale = tf.constant(scale, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch([x, alpha, scale])
        rho = metal_ops.robust_loss(x, alpha, scale)
        total = tf.reduce_sum(tf.cast(rho, tf.float32))
    gx, ga, gs = tape.gradient(total, [x, alpha, scale])
    return rho.numpy(), gx.numpy(), ga.numpy(), gs.numpy()


def f32(v):
    return np.asarray(v, np.float32)


X_GRID = f32([0.0, 1e-6, -1e-3, 0.05, -0.3, 1.0, -2.5, 7.0, -40.0, 1e3, -1e5])


# ---- values -----------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [2.0, 1.0, 0.0, -2.0, -INF, INF])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_special_cases_match_closed_forms(alpha, mode):
    scale = 0.7
    x = X_GRID if alpha != INF else f32([0.0, 1e-6, -1e-3, 0.05, -0.3, 1.0, -2.5, 4.0])
    fn = metal_ops.robust_loss if mode == "eager" else tf.function(metal_ops.robust_loss)
    out = fn(x, alpha, scale).numpy()
    assert out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out, closed_form(x, alpha, scale), rtol=3e-6, atol=1e-30)


GENERAL_ALPHAS = [-1e4, -10.0, -2.5, -0.3, -1e-6, 1e-6, 0.25, 1.5, 2.0 - 1e-6, 2.0 + 1e-6, 1.999, 3.0, 7.5]


@pytest.mark.parametrize("alpha", GENERAL_ALPHAS)
def test_general_form_and_gradients_match_mpmath(alpha):
    scale = 0.7
    alpha = float(np.float32(alpha))  # the kernel sees the float32 value
    x = X_GRID if alpha < 2.5 else f32([0.0, 1e-6, -1e-3, 0.05, -0.3, 1.0, -2.5])
    rho, gx, ga, gs = op_with_grads(x, alpha, scale)
    want = np.array([float(mp_rho(v, alpha, scale)) for v in x])
    np.testing.assert_allclose(rho, want, rtol=2e-5, atol=1e-37)
    grads = np.array([mp_grads(v, alpha, scale) for v in x])
    np.testing.assert_allclose(gx, grads[:, 0], rtol=2e-5, atol=1e-30)
    # alpha / scale gradients are sums over elements: compare the sums
    np.testing.assert_allclose(ga, grads[:, 1].sum(), rtol=5e-5, atol=1e-9)
    np.testing.assert_allclose(gs, grads[:, 2].sum(), rtol=2e-5, atol=1e-9)


@pytest.mark.parametrize("alpha", [-INF, INF, 2.0])
def test_gradients_of_closed_forms(alpha):
    c = 1.3
    x = f32([0.0, 0.1, -0.8, 2.0, -3.0])
    _, gx, ga, gs = op_with_grads(x, alpha, c)
    z = (x.astype(np.float64) / c) ** 2
    factor = {2.0: np.ones_like(z), -INF: np.exp(-0.5 * z), INF: np.exp(0.5 * z)}[alpha]
    np.testing.assert_allclose(gx, x / c**2 * factor, rtol=3e-6, atol=1e-12)
    np.testing.assert_allclose(gs, np.sum(-(x / c) * x / c**2 * factor), rtol=3e-6)
    assert ga == 0.0  # the reference's branches for these alphas do not depend on alpha


@pytest.mark.parametrize("alpha", [1e-6, -1e-6, 2 - 1e-6, 2 + 1e-6])
def test_near_special_alphas_approach_the_limits(alpha):
    x = f32([0.01, 0.5, 3.0])
    limit = closed_form(x, 0.0 if abs(alpha) < 1 else 2.0, 1.0)
    out = metal_ops.robust_loss(x, alpha, 1.0).numpy()
    np.testing.assert_allclose(out, limit, rtol=5e-5)
    assert np.all(np.isfinite(out))


SATURATION = float(np.float32(np.exp(np.float32(69.0))))  # documented cap of rho


def test_huge_residuals_are_finite_and_correct():
    x = f32([1e30, -3e37, 1e20, 1e9])
    for alpha in [1.0, 0.0, -2.0, -INF, 0.5, 2 - 1e-6, -1e-6, 1.999, 1.2]:
        alpha32 = float(np.float32(alpha))
        rho, gx, ga, gs = op_with_grads(x, alpha32, 0.5)
        assert np.all(np.isfinite(rho)) and np.all(np.isfinite(gx)), alpha
        assert np.isfinite(ga) and np.isfinite(gs), alpha
        if np.isfinite(alpha32) and alpha32 not in (0.0, 2.0):
            want = np.array([float(mp_rho(v, alpha32, 0.5)) for v in x])
            below = want < 0.99 * SATURATION
            np.testing.assert_allclose(rho[below], want[below], rtol=3e-5)
            np.testing.assert_allclose(rho[~below], SATURATION, rtol=1e-6)
            assert np.all(gx[~below] == 0)
    # alpha = 2 and +inf grow without bound: they saturate at the same cap, with
    # zero gradients there.
    for alpha, x_big in [(2.0, 1e30), (INF, 50.0)]:
        rho, gx, ga, gs = op_with_grads(f32([x_big, 1.0]), alpha, 1.0)
        np.testing.assert_allclose(rho[0], SATURATION, rtol=1e-6)
        assert gx[0] == 0 and np.isfinite(gs) and rho[1] < 1


@pytest.mark.parametrize("x,alpha,scale", [
    (np.inf, -2.0, 1.0), (-np.inf, -5.0, 1.0), (3.4e38, -2.0, 1e-3), (3.4e38, 0.0, 1e-3), (3.4e38, 1.5, 1e-3),
    (3.4e38, -0.5, 1e-3), (np.inf, 0.0, 1.0), (np.inf, 1.0, 1.0)])
def test_overflowing_ratio_x_over_scale(x, alpha, scale):
    # x / scale overflows float32 (or x is infinite): the loss is the limit
    # computed through logs, never NaN (a case the fuzz tests found).
    rho, gx, ga, gs = op_with_grads(f32([x]), alpha, scale)
    if np.isinf(x):
        if alpha < 0:  # the limit |alpha - 2| / -alpha
            np.testing.assert_allclose(rho, [abs(alpha - 2) / -alpha], rtol=1e-6)
        elif alpha == 0:
            assert rho[0] == np.inf
        else:
            np.testing.assert_allclose(rho, [SATURATION], rtol=1e-6)
        assert gx[0] == 0 and gs == 0
        return
    want = float(mp_rho(x, alpha, scale)) if alpha != 0 else float(
        mpmath.log1p(0.5 * (mpmath.mpf(x) / mpmath.mpf(float(np.float32(scale)))) ** 2))
    np.testing.assert_allclose(rho, [min(want, SATURATION)], rtol=1e-5)
    assert np.isfinite(gx[0]) and np.isfinite(ga) and np.isfinite(gs)


def test_no_nan_or_inf_anywhere_in_the_valid_domain():
    rng = np.random.default_rng(0)
    alphas = [-INF, -1e30, -1e3, -2.0, -1e-6, 0.0, 1e-7, 0.001, 1.0, 1.999, 2 - 2e-7, 2.0, 2 + 2.4e-7,
              2.5, 10.0, 1e3, INF]
    x = np.concatenate([[0.0, -0.0], np.logspace(-30, 18, 60), -np.logspace(-30, 18, 60),
                        rng.normal(size=50)]).astype(np.float32)
    for scale in [1e-3, 1.0, 1e3]:
        for alpha in alphas:
            rho, gx, ga, gs = op_with_grads(x, alpha, scale)
            for name, v in [("rho", rho), ("dx", gx), ("dalpha", ga), ("dscale", gs)]:
                assert np.all(np.isfinite(v)), (name, alpha, scale)


def test_zero_residual():
    for alpha in [-INF, -2.0, 0.0, 1e-6, 1.0, 2.0, 3.0, INF]:
        rho, gx, ga, gs = op_with_grads(f32([0.0, 0.0]), alpha, 0.1)
        assert np.all(rho == 0) and np.all(gx == 0) and ga == 0 and gs == 0, alpha


# ---- broadcasting, dtypes, shapes --------------------------------------------------
@pytest.mark.parametrize("alpha_vec,scale_vec", [(True, True), (True, False), (False, True)])
def test_per_channel_parameters_and_reduced_gradients(alpha_vec, scale_vec):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 4, 3)).astype(np.float32) * 2
    alphas = f32([-1.0, 0.5, 1.7])
    scales = f32([0.3, 1.0, 2.5])
    alpha = alphas if alpha_vec else f32(0.5)
    scale = scales if scale_vec else f32(1.0)
    rho, gx, ga, gs = op_with_grads(x, alpha, scale)
    want_ga = np.zeros(3)
    want_gs = np.zeros(3)
    for ch in range(3):
        a = float(alphas[ch] if alpha_vec else alpha)
        c = float(scales[ch] if scale_vec else scale)
        r, g, gac, gsc = op_with_grads(x[..., ch], a, c)
        np.testing.assert_allclose(rho[..., ch], r, rtol=1e-6)
        np.testing.assert_allclose(gx[..., ch], g, rtol=1e-6)
        want_ga[ch], want_gs[ch] = gac, gsc
    assert ga.shape == np.shape(alpha) and gs.shape == np.shape(scale)
    np.testing.assert_allclose(ga, want_ga if alpha_vec else want_ga.sum(), rtol=1e-5)
    np.testing.assert_allclose(gs, want_gs if scale_vec else want_gs.sum(), rtol=1e-5)


def test_large_tensor_reduction_matches_float64_sum():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(70000, 3)).astype(np.float32)
    alpha, scale = f32([0.0, 1.0, -2.0]), f32([0.5, 1.0, 2.0])
    rho, gx, ga, gs = op_with_grads(x, alpha, scale)
    z = (x.astype(np.float64) / scale) ** 2
    np.testing.assert_allclose(rho[:, 0], np.log1p(0.5 * z[:, 0]), rtol=3e-6)
    np.testing.assert_allclose(rho[:, 1], np.sqrt(z[:, 1] + 1) - 1, rtol=3e-6, atol=1e-12)
    np.testing.assert_allclose(rho[:, 2], 2 * z[:, 2] / (z[:, 2] + 4), rtol=3e-6, atol=1e-12)
    dsc = -(x / scale) * gx  # drho/dc = -(x/c) drho/dx, per element
    np.testing.assert_allclose(gs, dsc.astype(np.float64).sum(axis=0), rtol=1e-4)


@pytest.mark.parametrize("alpha", [-3.0, 0.0, 1.3, 1.9, 2.2, 5.0])
def test_vectorised_block_path_with_outliers_and_nans(alpha):
    # Scalar alpha / scale take the CPU kernel's SIMD block path; scattered huge
    # values and NaNs must fall back to the scalar formula inside a block.
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(300_001) * 3).astype(np.float32)
    x[::997] = 3e25
    x[5::1999] = -1e-30
    x[11::4999] = np.nan
    c = 0.7
    rho, gx, ga, gs = op_with_grads(x, alpha, c)
    finite = ~np.isnan(x)
    assert np.all(np.isnan(rho[~finite])) and np.all(np.isnan(gx[~finite]))
    xs = x[finite].astype(np.float64)
    z = (xs / c) ** 2
    b = abs(alpha - 2)
    if alpha == 0:
        want = np.log1p(0.5 * z)
        want_dx = xs / c**2 / (1 + 0.5 * z)
    else:
        want = (b / alpha) * np.expm1(0.5 * alpha * np.log1p(z / b))
        want_dx = xs / c**2 * np.exp((0.5 * alpha - 1) * np.log1p(z / b))
    want = np.where(want > SATURATION, SATURATION, want)
    want_dx = np.where(want >= SATURATION, 0.0, want_dx)
    np.testing.assert_allclose(rho[finite], want, rtol=1e-5, atol=1e-37)
    np.testing.assert_allclose(gx[finite], want_dx, rtol=1e-5, atol=1e-30)
    assert np.isnan(ga) and np.isnan(gs)  # NaN residuals poison the reductions, as they should
    clean = x[finite]
    rho2, gx2, ga2, gs2 = op_with_grads(clean, alpha, c)
    # the same elements through the scalar path (per-channel layout with C = 1 column repeated)
    rho3, gx3, ga3, gs3 = op_with_grads(np.stack([clean, clean], -1), [alpha, alpha], [c, c])
    np.testing.assert_allclose(rho2, rho3[:, 0], rtol=2e-6, atol=1e-37)
    np.testing.assert_allclose(gx2, gx3[:, 0], rtol=2e-6, atol=1e-37)
    # Sums of 3e5 float32 terms in two orders (the GPU kernels' reductions are
    # float32): about sqrt(n) * 2^-24 ~ 3e-5 apart.
    np.testing.assert_allclose(2 * ga2, np.sum(ga3), rtol=4e-5, atol=1e-6)
    np.testing.assert_allclose(2 * gs2, np.sum(gs3), rtol=4e-5)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_low_precision_dtypes_compute_in_float32(dtype):
    x = np.linspace(-3, 3, 25).astype(np.float32)
    xq = tf.cast(tf.constant(x), dtype)
    out = metal_ops.robust_loss(xq, 1.0, 0.5)
    assert out.dtype == dtype
    ref = closed_form(tf.cast(xq, tf.float32).numpy(), 1.0, 0.5)
    rtol = 1e-3 if dtype == tf.float16 else 8e-3
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(), ref, rtol=rtol, atol=1e-3)
    rho, gx, ga, gs = op_with_grads(x, 1.0, 0.5, dtype=dtype)
    assert gx.dtype == dtype.as_numpy_dtype and ga.dtype == np.float32
    ref_gx = x / 0.25 / np.sqrt((x / 0.5) ** 2 + 1)
    np.testing.assert_allclose(np.asarray(gx, np.float32), ref_gx, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (4, 0), (2, 0, 3)])
def test_empty_inputs(shape):
    x = np.zeros(shape, np.float32)
    alpha = f32([1.0, 0.0, 2.0]) if shape[-1] == 3 else 1.0
    rho, gx, ga, gs = op_with_grads(x, alpha, 0.5)
    assert rho.shape == shape and gx.shape == shape
    np.testing.assert_array_equal(ga, np.zeros(np.shape(alpha)))
    assert gs == 0


def test_scalar_x_and_shape_function():
    assert metal_ops.robust_loss(np.float32(0.3), 2.0, 1.0).numpy() == pytest.approx(0.045)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([3], tf.float32)])
    def f(x, a):
        y = metal_ops.robust_loss(x, a, 1.0)
        assert y.shape.as_list() == [None, 3]
        return y

    f.get_concrete_function()


# ---- tf.test.compute_gradient for every input --------------------------------------
@pytest.mark.parametrize("alpha", [-3.0, -0.7, 0.4, 1.3, 3.0])
def test_compute_gradient_all_inputs(alpha):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    a = f32([alpha, alpha * 0.5, alpha + 0.2])
    c = f32([0.6, 1.2, 2.0])
    theoretical, numerical = tf.test.compute_gradient(
        lambda xx, aa, cc: metal_ops.robust_loss(xx, aa, cc), [x, a, c], delta=1e-3)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=2e-2, atol=2e-3)


def test_compute_gradient_scalar_params():
    x = f32([[0.2, -1.5], [3.0, 0.05]])
    theoretical, numerical = tf.test.compute_gradient(
        lambda xx, aa, cc: metal_ops.robust_loss(xx, aa, cc), [x, f32(0.8), f32(0.9)], delta=1e-3)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=2e-2, atol=2e-3)


# ---- bad inputs -------------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.0, -1.0, INF, float("nan")])
def test_bad_scalar_scale(scale):
    with pytest.raises(tf.errors.InvalidArgumentError, match="'scale'"):
        metal_ops.robust_loss(f32([1.0]), 1.0, scale)


def test_nan_alpha():
    with pytest.raises(tf.errors.InvalidArgumentError, match="'alpha'"):
        metal_ops.robust_loss(f32([1.0]), float("nan"), 1.0)


@pytest.mark.cpu_semantics("the CPU kernel checks values; a GPU kernel gives NaN instead (docs/METAL_COMPAT.md)")
def test_bad_tensor_values_on_cpu():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'scale'.*scale\[1\] = -2"):
        metal_ops.robust_loss(np.ones((2, 3), np.float32), 1.0, tf.constant([1.0, -2.0, 1.0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'alpha'.*alpha\[2\]"):
        metal_ops.robust_loss(np.ones((2, 3), np.float32), tf.constant([1.0, 0.0, np.nan]), 1.0)


def test_shape_mismatch():
    x = np.ones((2, 3), np.float32)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'alpha'"):
        metal_ops.robust_loss(x, tf.constant([1.0, 1.0, 1.0, 1.0]), 1.0)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'scale'"):
        metal_ops.robust_loss(x, 1.0, tf.ones([2, 3]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'alpha'"):
        metal_ops.robust_loss(np.float32(1.0), tf.constant([1.0, 2.0]), 1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_wrong_dtype(dtype):
    with pytest.raises(TypeError, match="'x'"):
        metal_ops.robust_loss(np.ones(3, dtype), 1.0, 1.0)


# ---- Metal shaders through the MSL shim -------------------------------------------
def shim_forward(lib, x, alpha, scale, channels, grid):
    out = np.full_like(x, np.nan)
    lib.shim_robust_loss_forward(ptr(x), ptr(alpha), ptr(scale), ptr(out), i64(x.size), i64(channels),
                                 i64(alpha.size > 1), i64(scale.size > 1), u32(grid))
    return out


@pytest.mark.parametrize("grid", [1, 64, 1000])
def test_metal_forward_shader_on_msl_shim(grid):
    lib = load_shim()
    alphas = f32([-INF, -2.0, 0.0, 1.0, 2.0, INF, 1e-6, 2 - 1e-6, 0.4])
    x = np.ascontiguousarray(np.tile(f32([0.0, 0.3, -1.7, 2.2]), (9, 1)).T.copy())  # [4, 9]
    scale = f32([0.5])
    out = shim_forward(lib, x, alphas, scale, 9, grid)
    for j, a in enumerate(alphas):
        if a in (-INF, -2.0, 0.0, 1.0, 2.0, INF):
            want = closed_form(x[:, j], a, 0.5)
        else:
            want = [float(mp_rho(v, a, 0.5)) for v in x[:, j]]
        np.testing.assert_allclose(out[:, j], want, rtol=2e-5, atol=1e-30)


@pytest.mark.parametrize("grid", [1, 3, 256, 4096])
@pytest.mark.parametrize("channels", [1, 3, 5])
def test_metal_backward_shader_on_msl_shim(grid, channels):
    lib = load_shim()
    rng = np.random.default_rng(channels)
    x = rng.normal(size=(37, channels)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, size=x.shape).astype(np.float32)
    alpha = rng.uniform(-2, 3, size=channels).astype(np.float32)
    scale = rng.uniform(0.3, 2, size=channels).astype(np.float32)
    dx = np.full_like(x, np.nan)
    da = np.zeros(channels, np.float32)
    ds = np.zeros(channels, np.float32)
    lib.shim_robust_loss_backward(ptr(g), ptr(x), ptr(alpha), ptr(scale), ptr(dx), ptr(da), ptr(ds),
                                  i64(x.size), i64(channels), i64(channels > 1), i64(channels > 1),
                                  u32(grid))
    # reference: per-element mpmath gradients weighted by g, reduced per channel
    want_dx = np.zeros_like(x, dtype=np.float64)
    want_da = np.zeros(channels)
    want_ds = np.zeros(channels)
    for i in range(x.shape[0]):
        for ch in range(channels):
            gx_, ga_, gs_ = mp_grads(x[i, ch], alpha[ch], scale[ch])
            want_dx[i, ch] = g[i, ch] * gx_
            want_da[ch] += g[i, ch] * ga_
            want_ds[ch] += g[i, ch] * gs_
    np.testing.assert_allclose(dx, want_dx, rtol=3e-5, atol=1e-6)
    np.testing.assert_allclose(da, want_da, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ds, want_ds, rtol=1e-4, atol=1e-5)
