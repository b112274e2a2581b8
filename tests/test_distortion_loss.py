"""DistortionLoss (mip-NeRF 360, O(S) prefix-sum form): CPU kernels vs the
O(S^2) double sum in float64, gradients, edge cases, bad inputs, and the Metal
shaders through the MSL shim."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.metal_shim.shim import i64, load_shim, ptr, u32
from tests.reference.distortion_loss import reference

pytestmark = pytest.mark.every_device


def sample(rays, samples, seed=0, near=2.0, far=6.0, strictly=True):
    rng = np.random.default_rng(seed)
    gaps = rng.uniform(0.2 if strictly else 0.0, 1.0, size=(rays, samples + 1))
    t = near + (far - near) * np.cumsum(gaps, axis=1) / gaps.sum(axis=1, keepdims=True)
    t = np.concatenate([np.full((rays, 1), near), t[:, :-1]], axis=1) if samples >= 0 else t
    w = rng.uniform(0, 1, size=(rays, samples)) * (rng.uniform(size=(rays, samples)) > 0.3)
    w = w / np.maximum(w.sum(axis=1, keepdims=True), 1)
    return w.astype(np.float32), t.astype(np.float32)


def op_with_grads(w, t, upstream=None):
    w, t = tf.constant(w), tf.constant(t)
    with tf.GradientTape() as tape:
        tape.watch([w, t])
        loss = metal_ops.distortion_loss(w, t)
        total = tf.reduce_sum(loss * (upstream if upstream is not None else 1.0))
    gw, gt = tape.gradient(total, [w, t])
    return loss.numpy(), gw.numpy(), gt.numpy()


# ---- values and gradients --------------------------------------------------------------
@pytest.mark.parametrize("rays,samples", [(1, 1), (3, 2), (7, 16), (33, 64), (5, 200)])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_matches_double_sum(rays, samples, mode):
    w, t = sample(rays, samples, seed=rays * 1000 + samples)
    fn = metal_ops.distortion_loss if mode == "eager" else tf.function(metal_ops.distortion_loss)
    out = fn(w, t).numpy()
    assert out.shape == (rays,) and out.dtype == np.float32
    want, want_dw, want_dt = reference(w, t)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=1e-7)
    upstream = np.random.default_rng(1).uniform(0.5, 2.0, size=rays).astype(np.float32)
    _, gw, gt = op_with_grads(w, t, upstream)
    np.testing.assert_allclose(gw, want_dw * upstream[:, None], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(gt, want_dt * upstream[:, None], rtol=2e-5, atol=2e-6)


def test_single_sample_is_one_third_w2_d():
    w = np.array([[0.5], [2.0]], np.float32)
    t = np.array([[1.0, 3.0], [0.0, 0.25]], np.float32)
    np.testing.assert_allclose(metal_ops.distortion_loss(w, t).numpy(), [0.25 * 2 / 3, 4 * 0.25 / 3], rtol=1e-6)


def test_all_zero_weights():
    w = np.zeros((4, 8), np.float32)
    _, t = sample(4, 8)
    loss, gw, gt = op_with_grads(w, t)
    assert np.all(loss == 0) and np.all(gt == 0)
    # dL/dw_i = 2 sum_j w_j |m_i - m_j| + 2/3 w_i d_i = 0 at w = 0
    assert np.all(gw == 0)


def test_zero_rays_and_zero_samples():
    loss, gw, gt = op_with_grads(np.zeros((0, 5), np.float32), np.zeros((0, 6), np.float32))
    assert loss.shape == (0,) and gw.shape == (0, 5) and gt.shape == (0, 6)
    loss, gw, gt = op_with_grads(np.zeros((3, 0), np.float32), np.ones((3, 1), np.float32))
    assert np.all(loss == 0) and gw.shape == (3, 0) and np.all(gt == 0)


def test_ties_and_far_offsets():
    # Repeated edges (zero-width intervals) are allowed; a large offset of t
    # must not cost precision (midpoints are taken relative to t_0).
    w = np.array([[0.2, 0.3, 0.1, 0.4]], np.float32)
    t = np.array([[1.0, 1.0, 2.0, 2.0, 3.5]], np.float32)
    want, _, _ = reference(w, t)
    np.testing.assert_allclose(metal_ops.distortion_loss(w, t).numpy(), want, rtol=1e-6)
    w, t = sample(4, 64, seed=5)
    far = t + np.float32(1000.0)
    want, want_dw, _ = reference(w, far)
    loss, gw, _ = op_with_grads(w, far)
    np.testing.assert_allclose(loss, want, rtol=1e-4)
    np.testing.assert_allclose(gw, want_dw, rtol=1e-4, atol=1e-4)


def test_large_batch_against_double_sum():
    w, t = sample(4096, 64, seed=9)
    want, want_dw, want_dt = reference(w, t)
    loss, gw, gt = op_with_grads(w, t)
    np.testing.assert_allclose(loss, want, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(gw, want_dw, rtol=5e-5, atol=5e-6)
    np.testing.assert_allclose(gt, want_dt, rtol=5e-5, atol=5e-6)


def test_compute_gradient_weights_and_t():
    w, t = sample(3, 6, seed=2)
    theoretical, numerical = tf.test.compute_gradient(metal_ops.distortion_loss, [w, t], delta=1e-3)
    for th, nu in zip(theoretical, numerical):
        np.testing.assert_allclose(th, nu, rtol=1e-2, atol=2e-3)


def test_shape_function():
    @tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32), tf.TensorSpec([None, 33], tf.float32)])
    def f(w, t):
        y = metal_ops.distortion_loss(w, t)
        assert y.shape.as_list() == [None]
        return y

    f.get_concrete_function()


# ---- bad inputs --------------------------------------------------------------------------
@pytest.mark.not_on_metal("Metal kernels do not check values: they give NaN (docs/METAL_COMPAT.md)")
def test_decreasing_t_names_the_ray():
    w, t = sample(6, 5, seed=3)
    t[4, 3] = t[4, 2] - 0.5
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"non-decreasing.*ray 4 has t\[4, 2\]"):
        metal_ops.distortion_loss(w, t)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"ray 4"):
        op_with_grads(w, t)


@pytest.mark.not_on_metal("Metal kernels do not check values: they give NaN (docs/METAL_COMPAT.md)")
def test_nan_t_is_rejected():
    w, t = sample(2, 3)
    t[1, 2] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="ray 1"):
        metal_ops.distortion_loss(w, t)


@pytest.mark.parametrize("w_shape,t_shape,match", [
    ((4, 5), (4, 5), "'t'"), ((4, 5), (3, 6), "'t'|rays"), ((4,), (4, 5), "'weights'|rank"),
    ((4, 5), (4, 6, 1), "'t'|rank")])
def test_shape_mismatch(w_shape, t_shape, match):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
        metal_ops.distortion_loss(np.zeros(w_shape, np.float32), np.zeros(t_shape, np.float32))


def test_wrong_dtype():
    with pytest.raises(TypeError, match="'weights'"):
        metal_ops.distortion_loss(np.zeros((2, 3), np.float64), np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="'t'"):
        metal_ops.distortion_loss(np.zeros((2, 3), np.float32), np.zeros((2, 4), np.int32))


# ---- Metal shaders through the MSL shim --------------------------------------------------
@pytest.mark.parametrize("rays,samples,grid", [(1, 1, 1), (9, 16, 4), (40, 64, 256), (0, 8, 16), (3, 0, 8)])
def test_metal_shaders_on_msl_shim(rays, samples, grid):
    lib = load_shim()
    w, t = sample(rays, samples, seed=samples + 7)
    w, t = np.ascontiguousarray(w), np.ascontiguousarray(t)
    loss = np.full(rays, np.nan, np.float32)
    lib.shim_distortion_loss_forward(ptr(w), ptr(t), ptr(loss), i64(rays), i64(samples), u32(grid))
    g = np.linspace(0.5, 1.5, rays).astype(np.float32)
    gw = np.full_like(w, np.nan)
    gt = np.full_like(t, np.nan)
    lib.shim_distortion_loss_backward(ptr(g), ptr(w), ptr(t), ptr(gw), ptr(gt), i64(rays), i64(samples), u32(grid))
    want, want_dw, want_dt = reference(w, t)
    np.testing.assert_allclose(loss, want, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(gw, want_dw * g[:, None], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(gt, want_dt * g[:, None], rtol=2e-5, atol=2e-6)


def test_metal_shader_marks_unsorted_rays_with_nan():
    lib = load_shim()
    w, t = sample(3, 4)
    t[1, 2] = t[1, 1] - 1
    loss = np.zeros(3, np.float32)
    lib.shim_distortion_loss_forward(ptr(w), ptr(t), ptr(loss), i64(3), i64(4), u32(2))
    assert np.isnan(loss[1]) and np.all(np.isfinite(loss[[0, 2]]))
