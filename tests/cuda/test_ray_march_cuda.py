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
