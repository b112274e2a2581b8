"""GaussianRasterize CUDA kernels (one block per tile, batches of Gaussians in
shared memory, the backward's atomics) vs the NumPy reference
(tests/reference/gaussian_rasterize.py) through the harness (GPU machines
only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import gaussian_rasterize as ref


def bind(lib):
    i64, i32, vp = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    lib.metal_ops_gaussian_rasterize_forward.argtypes = [vp] * 7 + [i64, i64, i64, i32, i32, i32] + [vp] * 4
    lib.metal_ops_gaussian_rasterize_forward.restype = i32
    lib.metal_ops_gaussian_rasterize_backward.argtypes = [vp] * 11 + [i64, i64, i64, i32, i32, i32] + [vp] * 6
    lib.metal_ops_gaussian_rasterize_backward.restype = i32
    return lib


def run(cupy, lib, inputs, width, height, tile_size, v_image, v_alpha):
    """(image, alpha, last_ids, gradients) from the forward and backward launchers."""
    lib = bind(lib)
    n, c, m = inputs[2].shape[0], inputs[2].shape[1], inputs[5].shape[0]
    dev = [cupy.asarray(np.ascontiguousarray(x)) for x in inputs]
    image = cupy.full((height, width, c), np.nan, np.float32)
    alpha = cupy.full((height, width), np.nan, np.float32)
    last = cupy.full((height, width), -7, np.int32)
    s = stream_ptr(cupy)
    sizes = (n, c, m, width, height, tile_size)
    check(lib.metal_ops_gaussian_rasterize_forward(*[dptr(x) for x in dev], *sizes, dptr(image), dptr(alpha),
                                                   dptr(last), s))
    grads = [cupy.full(x.shape, np.nan, np.float32) for x in dev[:5]]
    dv_image, dv_alpha = cupy.asarray(v_image), cupy.asarray(v_alpha)
    check(lib.metal_ops_gaussian_rasterize_backward(*[dptr(x) for x in dev], dptr(alpha), dptr(last), dptr(dv_image),
                                                    dptr(dv_alpha), *sizes, *[dptr(g) for g in grads], s))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(image), cupy.asnumpy(alpha), cupy.asnumpy(last), [cupy.asnumpy(g) for g in grads]


def check_case(cupy, lib, inputs, width, height, tile_size, seed=1, grad_tol=2e-4):
    rng = np.random.default_rng(seed)
    c = inputs[2].shape[1]
    v_image = rng.uniform(-1, 1, (height, width, c)).astype(np.float32)
    v_alpha = rng.uniform(-1, 1, (height, width)).astype(np.float32)
    image, alpha, last, grads = run(cupy, lib, inputs, width, height, tile_size, v_image, v_alpha)
    want_image, want_alpha, want_last = ref.rasterize(*inputs, width, height, tile_size)
    np.testing.assert_allclose(image, want_image, rtol=0, atol=2e-5)
    np.testing.assert_allclose(alpha, want_alpha, rtol=0, atol=2e-5)
    np.testing.assert_array_equal(last, want_last)
    want = ref.vjp(*inputs, width, height, tile_size, v_image, v_alpha)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=grad_tol * max(1.0, np.abs(w).max(initial=0)))


@pytest.mark.parametrize("n,c,width,height,tile_size", [
    (0, 3, 16, 16, 16), (1, 1, 1, 1, 16), (60, 3, 37, 29, 16), (2000, 3, 200, 150, 16), (40, 1, 20, 24, 8),
    (40, 5, 33, 17, 16), (40, 2, 33, 17, 16), (25, 4, 10, 70, 32), (30, 3, 19, 23, 5), (500, 8, 64, 64, 16),
])
def test_matches_numpy(n, c, width, height, tile_size):
    cupy, lib = require_gpu()
    inputs = ref.scene(np.random.default_rng(n + width), n, c, width, height, tile_size)
    check_case(cupy, lib, inputs, width, height, tile_size)


def test_saturated_pixels_stop_early():
    """More Gaussians per tile than a batch, most pixels stopping early. The
    backward recovers each Gaussian's T from the final one (about 1e-4) by
    division in float32, as gsplat does: its gradients carry about 1e-3 of
    relative rounding here."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(9)
    inputs = ref.scene(rng, 700, 3, 40, 36, 16, scale=(6.0, 14.0), opacity=(0.3, 1.0))
    inputs[0][:] = rng.uniform([10, 10], [30, 26], (700, 2))
    inputs[5], inputs[6] = ref.tile_bin(inputs[0], np.full((700, 2), 40), rng.uniform(1, 5, 700), 40, 36)
    check_case(cupy, lib, inputs, 40, 36, 16, grad_tol=2e-3)


def test_ids_and_ranges_out_of_bounds_are_skipped():
    """The device does not read outside the inputs: an id outside [0, N) is
    skipped, and a range is clamped into gaussian_ids."""
    cupy, lib = require_gpu()
    inputs = ref.scene(np.random.default_rng(3), 60, 3, 37, 29, 16)
    bad = [x.copy() for x in inputs]
    bad[5][4] = 1 << 30
    bad[6][-1, 1] = 1 << 30
    rng = np.random.default_rng(2)
    v = rng.uniform(-1, 1, (29, 37, 3)).astype(np.float32), rng.uniform(-1, 1, (29, 37)).astype(np.float32)
    image, alpha, _, grads = run(cupy, lib, bad, 37, 29, 16, *v)
    assert np.all(np.isfinite(image)) and np.all(np.isfinite(alpha))
    assert all(np.all(np.isfinite(g)) for g in grads)
