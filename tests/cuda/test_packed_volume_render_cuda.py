"""PackedVolumeRender CUDA kernels vs the NumPy float64 reference through the
C-ABI harness (GPU machines only; every test skips without CuPy, a GPU or the
harness)."""
import ctypes

import numpy as np
import pytest

from tests.reference import packed_volume_render as ref
from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference.render_testing import CUDA_GRADIENT_GRID, assert_grads_close, cotangents

DTYPES = {"float32": np.float32, "float64": np.float64}
TOL = {"float32": dict(rtol=3e-5, atol=3e-5), "float64": dict(rtol=1e-10, atol=1e-11)}
NULL = ctypes.c_void_p(0)


def packed_with_margin(counts, eps, dtype, sigma_scale=2.0):
    for seed in range(50):
        p = ref.make_packed(counts, seed=seed, dtype=dtype, surface=True, sigma_scale=sigma_scale)
        if ref.margin_ok(p[0], p[2], p[3], p[4], p[5], eps):
            return p
    raise AssertionError("no seed gives a margin around the early-termination threshold")


def background(kind, R, dtype):
    rng = np.random.default_rng(11)
    return rng.uniform(0, 1, size=3 if kind == "shared" else (R, 3)).astype(dtype)


def forward(cupy, lib, name, p, bg, eps, with_weights=True, bad=None):
    sigma = p[0]
    R, N, dt = len(p[5]), len(sigma), sigma.dtype
    d = [cupy.asarray(np.ascontiguousarray(a)) for a in (*p[:4], p[4].astype(np.int32), p[5].astype(np.int32), bg)]
    out_rgb = cupy.full((R, 3), -7, dt)
    depth = cupy.full((R,), -7, dt)
    opacity = cupy.full((R,), -7, dt)
    weights = cupy.full((max(N, 1),), -7, dt)
    fn = getattr(lib, f"metal_ops_packed_volume_render_forward_{name}")
    check(fn(*[dptr(a) for a in d], ctypes.c_int32(bg.ndim == 2), ctypes.c_int64(R), ctypes.c_int64(N),
             ctypes.c_float(eps), dptr(out_rgb), dptr(depth), dptr(opacity), dptr(weights) if with_weights else NULL,
             NULL if bad is None else dptr(bad), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return [cupy.asnumpy(a) for a in (out_rgb, depth, opacity, weights[:N])]


def backward(cupy, lib, name, p, bg, eps, outputs, cot, bad=None):
    sigma = p[0]
    R, N, dt = len(p[5]), len(sigma), sigma.dtype
    with_weights = cot[3] is not None
    d = [cupy.asarray(np.ascontiguousarray(a))
         for a in (*p[:4], p[4].astype(np.int32), p[5].astype(np.int32), bg, *outputs, cot[0], cot[1], cot[2])]
    g_w = cupy.asarray(cot[3]) if with_weights else None
    grad_sigma = cupy.full((max(N, 1),), -7, dt)
    grad_rgb = cupy.full((max(N, 1), 3), -7, dt)
    grad_bg = cupy.full((R, 3), -7, dt)
    fn = getattr(lib, f"metal_ops_packed_volume_render_backward_{name}")
    check(fn(*[dptr(a) for a in d[:7]], ctypes.c_int32(bg.ndim == 2), ctypes.c_int64(R), ctypes.c_int64(N),
             ctypes.c_float(eps), dptr(d[7]), dptr(d[8]), dptr(d[9]), dptr(d[10]) if with_weights else NULL,
             dptr(d[11]), dptr(d[12]), dptr(d[13]), dptr(g_w) if with_weights else NULL, dptr(grad_sigma),
             dptr(grad_rgb), dptr(grad_bg), NULL if bad is None else dptr(bad), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(grad_sigma)[:N], cupy.asnumpy(grad_rgb)[:N], cupy.asnumpy(grad_bg)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("counts", [[1], [3, 0, 5, 1, 0, 8], [0, 0], [], "random_1000", "random_70000"])
@pytest.mark.parametrize("bg_kind", ["shared", "per_ray"])
@pytest.mark.parametrize("eps", [0.0, 1e-4, 0.3])
def test_forward_matches_reference(name, counts, bg_kind, eps):
    cupy, lib = require_gpu()
    dtype = DTYPES[name]
    if isinstance(counts, str):
        counts = np.random.default_rng(4).integers(0, 48, size=int(counts.split("_")[1]))
        p = ref.make_packed(counts, seed=1, dtype=dtype, surface=True)
    else:
        p = packed_with_margin(counts, eps, dtype)
    bg = background(bg_kind, len(p[5]), dtype)
    got = forward(cupy, lib, name, p, bg, eps)
    want = ref.render(*p, bg, eps)
    if len(p[5]) > 100 and eps > 0:
        # float32 and the float64 reference may disagree on where a ray stops
        # right at the threshold: compare the rays clear of it.
        clear = np.array([ref.margin_ok(p[0][s], p[2][s], p[3][s], [0], [s.stop - s.start], eps)
                          for s in ref.ray_slices(p[4], p[5])])
        assert clear.mean() > 0.95
        samples = np.repeat(clear, p[5])
        for g, w, mask in zip(got, want, (clear, clear, clear, samples)):
            np.testing.assert_allclose(g[mask], w[mask], **TOL[name])
        return
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[name])


@CUDA_GRADIENT_GRID
def test_backward_matches_finite_differences(name, bg_kind, eps, with_weights):
    cupy, lib = require_gpu()
    dtype = DTYPES[name]
    counts = [4, 0, 6, 1, 5, 3]
    p = packed_with_margin(counts, eps, dtype, sigma_scale=1.5)
    R, N = len(counts), len(p[0])
    bg = background(bg_kind, R, dtype)
    outputs = forward(cupy, lib, name, p, bg, eps)
    cot = cotangents(R, N, dtype, with_weights, seed=3)
    g_sigma, g_rgb, g_bg = backward(cupy, lib, name, p, bg, eps, outputs, cot)
    n_sigma, n_rgb, n_bg = ref.numeric_grads(*p, bg, eps, cot)
    # The harness returns the background's gradient per ray: summed for one colour.
    assert_grads_close((g_sigma, g_rgb, g_bg.sum(0) if bg.ndim == 1 else g_bg), (n_sigma, n_rgb, n_bg), dtype, bg)


def test_invalid_rays_are_flagged_and_get_nan():
    cupy, lib = require_gpu()
    counts = [3, 2, 4, 2, 5, 1]
    p = [np.array(a) for a in ref.make_packed(counts, dtype=np.float32)]
    p[0][4] = -1.0  # ray 1: negative sigma
    p[5][3] = -1  # ray 3: negative count (ray 4's offset then mismatches too)
    bad = cupy.full((1,), np.iinfo(np.uint64).max, cupy.uint64)
    got = forward(cupy, lib, "float32", p, background("shared", 6, np.float32), 1e-4, bad=bad)
    assert int(cupy.asnumpy(bad)[0]) == 1
    for r in (1, 3, 4):
        assert np.isnan(got[0][r]).all() and np.isnan(got[1][r]) and np.isnan(got[2][r])
    assert np.isfinite(got[0][[0, 2, 5]]).all()
    # The backward checks the layout (ray 3 first).
    bad[...] = np.iinfo(np.uint64).max
    cot = (np.ones((6, 3), np.float32), np.ones(6, np.float32), np.ones(6, np.float32), None)
    backward(cupy, lib, "float32", p, background("shared", 6, np.float32), 1e-4, got[:3] + [got[3]], cot, bad=bad)
    assert int(cupy.asnumpy(bad)[0]) == 3
