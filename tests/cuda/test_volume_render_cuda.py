"""VolumeRender CUDA kernels vs the NumPy float64 reference through the C-ABI
harness (GPU machines only; every test skips without CuPy, a GPU or the harness)."""
import ctypes

import numpy as np
import pytest

from tests.reference import volume_render as ref
from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference.render_testing import CUDA_GRADIENT_GRID, assert_grads_close, cotangents

DTYPES = {"float32": np.float32, "float64": np.float64}
TOL = {"float32": dict(rtol=3e-5, atol=3e-5), "float64": dict(rtol=1e-10, atol=1e-11)}
NULL = ctypes.c_void_p(0)


def rays_with_margin(R, S, eps, dtype, surface=True, sigma_scale=2.0):
    """Small batches: a seed whose transmittances all stay clear of the threshold."""
    for seed in range(50):
        sigma, rgb, t = ref.make_rays(R, S, seed=seed, dtype=dtype, surface=surface, sigma_scale=sigma_scale)
        if ref.margin_ok(sigma, t, eps):
            return sigma, rgb, t
    raise AssertionError("no seed gives a margin around the early-termination threshold")


def background(kind, R, dtype):
    rng = np.random.default_rng(11)
    return rng.uniform(0, 1, size=3 if kind == "shared" else (R, 3)).astype(dtype)


def forward(cupy, lib, name, sigma, rgb, t, bg, eps, with_weights=True, bad=None):
    R, S = sigma.shape
    dt = sigma.dtype
    d = [cupy.asarray(a) for a in (sigma, rgb, t, bg)]
    out_rgb = cupy.full((R, 3), -7, dt)
    depth = cupy.full((R,), -7, dt)
    opacity = cupy.full((R,), -7, dt)
    weights = cupy.full((R, S), -7, dt)
    fn = getattr(lib, f"metal_ops_volume_render_forward_{name}")
    check(fn(dptr(d[0]), dptr(d[1]), dptr(d[2]), dptr(d[3]), ctypes.c_int32(bg.ndim == 2), ctypes.c_int64(R),
             ctypes.c_int64(S), ctypes.c_float(eps), dptr(out_rgb), dptr(depth), dptr(opacity),
             dptr(weights) if with_weights else NULL, NULL if bad is None else dptr(bad), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return [cupy.asnumpy(a) for a in (out_rgb, depth, opacity, weights)]


def backward(cupy, lib, name, sigma, rgb, t, bg, eps, outputs, cot):
    R, S = sigma.shape
    dt = sigma.dtype
    with_weights = cot[3] is not None
    d = [cupy.asarray(np.ascontiguousarray(a)) for a in (sigma, rgb, t, bg, *outputs, cot[0], cot[1], cot[2])]
    g_w = cupy.asarray(cot[3]) if with_weights else None
    grad_sigma = cupy.full((R, S), -7, dt)
    grad_rgb = cupy.full((R, S, 3), -7, dt)
    grad_bg = cupy.full((R, 3), -7, dt)
    fn = getattr(lib, f"metal_ops_volume_render_backward_{name}")
    check(fn(dptr(d[0]), dptr(d[1]), dptr(d[2]), dptr(d[3]), ctypes.c_int32(bg.ndim == 2), ctypes.c_int64(R),
             ctypes.c_int64(S), ctypes.c_float(eps), dptr(d[4]), dptr(d[5]), dptr(d[6]),
             dptr(d[7]) if with_weights else NULL, dptr(d[8]), dptr(d[9]), dptr(d[10]),
             dptr(g_w) if with_weights else NULL, dptr(grad_sigma), dptr(grad_rgb), dptr(grad_bg),
             stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(grad_sigma), cupy.asnumpy(grad_rgb), cupy.asnumpy(grad_bg)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("R,S", [(1, 1), (5, 7), (1000, 64), (70000, 48), (3, 0), (0, 4)])
@pytest.mark.parametrize("bg_kind", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-4, 0.3])
def test_forward_matches_reference(name, R, S, bg_kind, eps):
    cupy, lib = require_gpu()
    dtype = DTYPES[name]
    sigma, rgb, t = ref.make_rays(R, S, seed=R + S, dtype=dtype, surface=True)
    # Compare the rays whose transmittances are clear of the threshold (float32
    # and the float64 reference may disagree on K right at it).
    clear = ref.rays_clear_of_threshold(sigma, t, eps)
    assert R == 0 or clear.mean() > 0.95
    bg = background(bg_kind, R, dtype)
    got = forward(cupy, lib, name, sigma, rgb, t, bg, eps)
    want = ref.render(sigma, rgb, t, bg, eps)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[clear], w[clear], **TOL[name])


def test_forward_without_weights_leaves_weights_untouched():
    cupy, lib = require_gpu()
    sigma, rgb, t = rays_with_margin(64, 16, 1e-4, np.float32)
    bg = background("shared", 64, np.float32)
    got = forward(cupy, lib, "float32", sigma, rgb, t, bg, 1e-4, with_weights=False)
    want = ref.render(sigma, rgb, t, bg, 1e-4)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, **TOL["float32"])
    assert np.all(got[3] == -7)


@CUDA_GRADIENT_GRID
def test_backward_matches_finite_differences(name, bg_kind, eps, with_weights):
    cupy, lib = require_gpu()
    dtype = DTYPES[name]
    R, S = 6, 9
    sigma, rgb, t = rays_with_margin(R, S, eps, dtype, sigma_scale=1.5)
    bg = background(bg_kind, R, dtype)
    outputs = forward(cupy, lib, name, sigma, rgb, t, bg, eps)
    cot = cotangents(R, (R, S), dtype, with_weights, seed=3)
    g_sigma, g_rgb, g_bg = backward(cupy, lib, name, sigma, rgb, t, bg, eps, outputs, cot)
    n_sigma, n_rgb, n_bg = ref.numeric_grads(sigma, rgb, t, bg, eps, cot)
    # The harness returns the background's gradient per ray: summed for one colour.
    assert_grads_close((g_sigma, g_rgb, g_bg.sum(0) if bg.ndim == 1 else g_bg), (n_sigma, n_rgb, n_bg), dtype, bg)


def test_backward_large_batch_float32_agrees_with_float64_kernel_and_skips_terminated_samples():
    cupy, lib = require_gpu()
    R, S, eps = 50000, 64, 1e-4
    sigma, rgb, t = ref.make_rays(R, S, seed=9, dtype=np.float64, surface=True)
    clear = ref.rays_clear_of_threshold(sigma, t, eps, margin=1e-2)
    assert clear.mean() > 0.95
    bg = background("per_ray", R, np.float64)
    rng = np.random.default_rng(5)
    cot = (rng.normal(size=(R, 3)), rng.normal(size=R), rng.normal(size=R), None)
    out64 = forward(cupy, lib, "float64", sigma, rgb, t, bg, eps)
    g64 = backward(cupy, lib, "float64", sigma, rgb, t, bg, eps, out64, cot)
    f32 = [a.astype(np.float32) for a in (sigma, rgb, t, bg)]
    out32 = forward(cupy, lib, "float32", *f32, eps)
    g32 = backward(cupy, lib, "float32", *f32, eps, out32, tuple(c.astype(np.float32) for c in cot[:3]) + (None,))
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a[clear], b[clear], rtol=1e-3, atol=1e-3)
    skipped = ref.render(sigma, rgb, t, None, eps)[3] == 0
    skipped &= (ref.render(sigma, rgb, t, None, 0.0)[3] > 0) & clear[:, None]
    assert skipped.any()
    np.testing.assert_array_equal(g32[0][skipped], 0.0)


def test_invalid_rays_are_flagged_and_get_nan():
    cupy, lib = require_gpu()
    R, S = 200, 8
    sigma, rgb, t = ref.make_rays(R, S, dtype=np.float32)
    sigma[17, 3] = -1.0
    sigma[150, 0] = np.nan
    t[42, 5] = t[42, 6] + 1.0
    t[190, 1] = t[190, 2] + 1.0
    bad = cupy.full((2,), np.iinfo(np.uint64).max, cupy.uint64)
    got = forward(cupy, lib, "float32", sigma, rgb, t, background("shared", R, np.float32), 1e-4, bad=bad)
    assert cupy.asnumpy(bad).tolist() == [17, 42]
    for r in (17, 150, 42, 190):
        assert np.isnan(got[0][r]).all() and np.isnan(got[1][r]) and np.isnan(got[2][r])
    assert np.isfinite(got[0][0]).all()
