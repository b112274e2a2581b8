"""RayMarch CUDA kernels (count, CUB scan, fill) vs the float64 reference of
the op's specification through the harness (GPU machines only; skips
elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference.ray_march import UNIT, grid_bits, random_case, reference


def run(cupy, lib, origins, dirs, near, far, bits, aabb, grid_resolution, step_size, cone_angle=0.0,
        max_step_size=1e10, max_samples=1024, jitter=False, seed=0):
    rays = len(origins)
    cascades = bits.shape[0]
    attrs = ((ctypes.c_float * 6)(*aabb), grid_resolution, cascades, ctypes.c_float(step_size),
             ctypes.c_float(cone_angle), ctypes.c_float(max_step_size), max_samples, int(jitter), seed, rays)
    d = [cupy.asarray(np.ascontiguousarray(a)) for a in (origins, dirs, near, far, bits)]
    counts = cupy.full((max(rays, 1),), -1, cupy.int32)
    offsets = cupy.full((max(rays, 1),), -1, cupy.int32)
    total = cupy.zeros((1,), cupy.int64)
    lib.metal_ops_ray_march_scratch_bytes.restype = ctypes.c_size_t
    nbytes = lib.metal_ops_ray_march_scratch_bytes(rays)
    scratch = cupy.empty((max(nbytes, 1),), cupy.uint8)
    err = ctypes.create_string_buffer(512)
    s = stream_ptr(cupy)
    check(lib.metal_ops_ray_march_count(*attrs, *[dptr(a) for a in d], dptr(counts), dptr(offsets), dptr(total),
                                        dptr(scratch), ctypes.c_size_t(nbytes), s, err, 512))
    cupy.cuda.get_current_stream().synchronize()
    n = int(total.get()[0]) if rays else 0
    out = [cupy.full((max(n, 1),), np.nan, cupy.float32), cupy.full((max(n, 1),), np.nan, cupy.float32),
           cupy.full((max(n, 1),), -1, cupy.int32)]
    check(lib.metal_ops_ray_march_fill(*attrs, *[dptr(a) for a in d], dptr(offsets), *[dptr(a) for a in out], s,
                                       err, 512))
    cupy.cuda.get_current_stream().synchronize()
    return [a.get()[:n] for a in out] + [offsets.get()[:rays], counts.get()[:rays]]


def assert_same(got, want):
    for k in (2, 3, 4):
        np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("g,cascades,fill", [(4, 1, 0.5), (16, 1, 0.2), (8, 2, 0.3), (5, 3, 0.6), (32, 1, 0.05)])
@pytest.mark.parametrize("cone_angle,max_samples,jitter", [(0.0, 1024, False), (0.02, 1024, True), (0.0, 7, False)])
def test_matches_reference(g, cascades, fill, cone_angle, max_samples, jitter):
    cupy, lib = require_gpu()
    origins, dirs, near, far, bits = random_case(g * 100 + cascades, 301, g, cascades, fill)
    kw = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.0123, cone_angle=cone_angle,
              max_step_size=0.2, max_samples=max_samples, jitter=jitter, seed=5)
    assert_same(run(cupy, lib, origins, dirs, near, far, bits, **kw),
                reference(origins, dirs, near, far, bits, **kw))


def test_hand_built_full_grid():
    cupy, lib = require_gpu()
    bits = grid_bits(np.ones((1, 4, 4, 4)), 4)
    got = run(cupy, lib, np.array([[-1.0, 0.3, 0.3]], np.float32), np.array([[1.0, 0.0, 0.0]], np.float32),
              np.zeros(1, np.float32), np.full(1, 10.0, np.float32), bits, UNIT, 4, 0.125)
    np.testing.assert_array_equal(got[0], 1.0 + 0.125 * np.arange(8))
    np.testing.assert_array_equal(got[4], [8])


def test_many_rays_and_empty_batch():
    cupy, lib = require_gpu()
    origins, dirs, near, far, bits = random_case(3, 200_000, 64, 2, 0.1)
    kw = dict(aabb=UNIT, grid_resolution=64, step_size=0.01, cone_angle=0.004, max_step_size=0.05)
    got = run(cupy, lib, origins, dirs, near, far, bits, **kw)
    sub = np.arange(0, 200_000, 997)
    want = reference(origins[sub], dirs[sub], near[sub], far[sub], bits, **kw)
    np.testing.assert_array_equal(got[4][sub], want[4])
    np.testing.assert_array_equal(got[3], np.cumsum(got[4]) - got[4])
    assert np.all(np.diff(got[2]) >= 0)
    empty = run(cupy, lib, origins[:0], dirs[:0], near[:0], far[:0], bits, **kw)
    assert all(a.shape == (0,) for a in empty)


def test_bad_attributes_are_refused_with_the_ops_message():
    cupy, lib = require_gpu()
    err = ctypes.create_string_buffer(512)
    rc = lib.metal_ops_ray_march_fill((ctypes.c_float * 6)(*UNIT), 4, 1, ctypes.c_float(0.0), ctypes.c_float(0.0),
                                      ctypes.c_float(1.0), 8, 0, 0, 0, *([None] * 9), None, err, 512)
    assert rc == -1 and b"'step_size' must be finite and > 0" in err.value


def run_static(cupy, lib, origins, dirs, near, far, bits, sample_budget, aabb, grid_resolution, step_size,
               cone_angle=0.0, max_step_size=1e10, max_samples=1024, jitter=False, seed=0):
    """RayMarchStatic's seven outputs (cuda::LaunchRayMarchStatic, the XLA CUDA handler's launch)."""
    rays = len(origins)
    attrs = ((ctypes.c_float * 6)(*aabb), grid_resolution, bits.shape[0], ctypes.c_float(step_size),
             ctypes.c_float(cone_angle), ctypes.c_float(max_step_size), max_samples, int(jitter))
    d = [cupy.asarray(np.ascontiguousarray(a)) for a in (origins, dirs, near, far, bits)]
    device_seed = cupy.asarray(np.array([seed], np.int32))
    out = [cupy.full((max(sample_budget, 1),), np.nan, cupy.float32),
           cupy.full((max(sample_budget, 1),), np.nan, cupy.float32), cupy.full((max(sample_budget, 1),), -7, cupy.int32),
           cupy.full((max(rays, 1),), -7, cupy.int32), cupy.full((max(rays, 1),), -7, cupy.int32),
           cupy.full((1,), -7, cupy.int32), cupy.full((1,), -7, cupy.int32)]
    lib.metal_ops_ray_march_scratch_bytes.restype = ctypes.c_size_t
    nbytes = lib.metal_ops_ray_march_scratch_bytes(rays)
    scratch = cupy.empty((max(nbytes, 1),), cupy.uint8)
    err = ctypes.create_string_buffer(512)
    check(lib.metal_ops_ray_march_static(*attrs, dptr(device_seed), rays, *[dptr(a) for a in d],
                                         ctypes.c_longlong(sample_budget), *[dptr(a) for a in out], dptr(scratch),
                                         ctypes.c_size_t(nbytes if rays else 0), stream_ptr(cupy), err, 512))
    cupy.cuda.get_current_stream().synchronize()
    got = [a.get() for a in out]
    return got[0][:sample_budget], got[1][:sample_budget], got[2][:sample_budget], got[3][:rays], got[4][:rays], \
        int(got[5][0]), int(got[6][0])


def static_from_march(march, rays, sample_budget):
    """RayMarchStatic's outputs as the CPU functor defines them, from RayMarch's."""
    t0, t1, idx, _, counts = march
    ends = np.cumsum(counts.astype(np.int64))
    kept = int(np.sum(ends <= sample_budget))  # the inclusive sums grow: the kept rays are a prefix
    n = int(ends[kept - 1]) if kept else 0
    cnt = np.where(np.arange(rays) < kept, counts, 0).astype(np.int32)
    off = np.where(np.arange(rays) < kept, ends - counts, n).astype(np.int32)
    pad = sample_budget - n
    return (np.concatenate([t0[:n], np.zeros(pad, np.float32)]), np.concatenate([t1[:n], np.zeros(pad, np.float32)]),
            np.concatenate([idx[:n], np.full(pad, max(rays - 1, 0), np.int32)]), off, cnt, n, kept)


@pytest.mark.parametrize("jitter", [False, True])
def test_static_is_ray_march_cut_and_padded(jitter):
    # The samples kept are RayMarch's own on this GPU, bit for bit (the same kernels).
    cupy, lib = require_gpu()
    origins, dirs, near, far, bits = random_case(17, 301, 16, 2, 0.3)
    kw = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=16, step_size=0.0123, cone_angle=0.01,
              max_step_size=0.2, jitter=jitter, seed=11)
    march = run(cupy, lib, origins, dirs, near, far, bits, **kw)
    total = len(march[0])
    assert total > 100
    for budget in [0, 1, total // 3, total - 1, total, total + 257]:
        got = run_static(cupy, lib, origins, dirs, near, far, bits, budget, **kw)
        want = static_from_march(march, len(origins), budget)
        for k in range(7):
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"budget {budget}, output {k}")


def test_static_without_rays_is_all_padding():
    cupy, lib = require_gpu()
    bits = grid_bits(np.ones((1, 4, 4, 4)), 4)
    empty = np.zeros((0, 3), np.float32)
    got = run_static(cupy, lib, empty, empty, np.zeros(0, np.float32), np.zeros(0, np.float32), bits, 5, UNIT, 4,
                     0.125)
    np.testing.assert_array_equal(got[0], np.zeros(5, np.float32))
    np.testing.assert_array_equal(got[2], np.zeros(5, np.int32))
    assert got[3].shape == (0,) and got[5:] == (0, 0)
