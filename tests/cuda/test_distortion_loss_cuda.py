"""DistortionLoss CUDA kernels (warp per ray) vs the O(S^2) float64 double sum
through the harness (GPU machines only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference.distortion_loss import reference


def sample(rays, samples, seed=0):
    rng = np.random.default_rng(seed)
    gaps = rng.uniform(0.2, 1.0, size=(rays, samples + 1))
    t = 2.0 + 4.0 * np.cumsum(gaps, axis=1) / gaps.sum(axis=1, keepdims=True)
    t = np.concatenate([np.full((rays, 1), 2.0), t[:, :-1]], axis=1)
    w = rng.uniform(0, 1, size=(rays, samples)) * (rng.uniform(size=(rays, samples)) > 0.3)
    w = w / np.maximum(w.sum(axis=1, keepdims=True), 1)
    return np.ascontiguousarray(w, np.float32), np.ascontiguousarray(t, np.float32)


def run(cupy, lib, w, t, g):
    rays, samples = w.shape
    d_w, d_t, d_g = cupy.asarray(w), cupy.asarray(t), cupy.asarray(g)
    d_loss = cupy.full((rays,), np.nan, cupy.float32)
    d_gw, d_gt = cupy.full_like(d_w, np.nan), cupy.full_like(d_t, np.nan)
    d_bad = cupy.zeros((1,), cupy.uint64)
    s = stream_ptr(cupy)
    n_r, n_s = ctypes.c_int64(rays), ctypes.c_int64(samples)
    check(lib.metal_ops_distortion_loss_check(dptr(d_t), n_r, n_s, dptr(d_bad), s))
    check(lib.metal_ops_distortion_loss_forward(dptr(d_w), dptr(d_t), dptr(d_loss), n_r, n_s, s))
    check(lib.metal_ops_distortion_loss_backward(dptr(d_g), dptr(d_w), dptr(d_t), dptr(d_gw), dptr(d_gt), n_r, n_s, s))
    cupy.cuda.get_current_stream().synchronize()
    return (cupy.asnumpy(d_loss), cupy.asnumpy(d_gw), cupy.asnumpy(d_gt), int(cupy.asnumpy(d_bad)[0]))


@pytest.mark.parametrize("rays,samples", [(1, 1), (3, 5), (17, 31), (9, 32), (40, 33), (100, 64), (65, 100),
                                          (4096, 256), (3, 0), (0, 8)])
def test_matches_double_sum(rays, samples):
    cupy, lib = require_gpu()
    w, t = sample(rays, samples, seed=rays + samples)
    g = np.random.default_rng(1).uniform(0.5, 1.5, size=rays).astype(np.float32)
    loss, gw, gt, bad = run(cupy, lib, w, t, g)
    assert bad == 2**64 - 1
    if rays == 0:
        return
    want, want_dw, want_dt = reference(w, t)
    np.testing.assert_allclose(loss, want, rtol=3e-5, atol=1e-7)
    np.testing.assert_allclose(gw, want_dw * g[:, None], rtol=5e-5, atol=5e-6)
    np.testing.assert_allclose(gt, want_dt * g[:, None], rtol=5e-5, atol=5e-6)


def test_unsorted_rays_are_found_and_marked():
    cupy, lib = require_gpu()
    w, t = sample(300, 70, seed=4)
    t[211, 40] = t[211, 39] - 0.1
    t[250, 3] = np.nan
    loss, gw, gt, bad = run(cupy, lib, w, t, np.ones(300, np.float32))
    assert bad == 211
    assert np.isnan(loss[211]) and np.isnan(loss[250]) and np.all(np.isnan(gw[211]))
    ok = np.ones(300, bool)
    ok[[211, 250]] = False
    want, _, _ = reference(w[ok], t[ok])
    np.testing.assert_allclose(loss[ok], want, rtol=3e-5, atol=1e-7)


def test_all_zero_weights():
    cupy, lib = require_gpu()
    _, t = sample(64, 48)
    w = np.zeros((64, 48), np.float32)
    loss, gw, gt, _ = run(cupy, lib, w, t, np.ones(64, np.float32))
    assert np.all(loss == 0) and np.all(gw == 0) and np.all(gt == 0)
