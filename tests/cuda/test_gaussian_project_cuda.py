"""GaussianProject CUDA kernels (one thread per Gaussian) vs the NumPy
reference (tests/reference/gaussian_project.py) through the harness (GPU
machines only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from metal_ops.gaussian_project import scene
from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import gaussian_project as ref

ATTRS = (0.01, 1e10, 0.3)  # near_plane, far_plane, eps2d


def run(cupy, lib, inputs, opacities, cots, width, height):
    """(means2d, conics, depths, radii), (grad_means, grad_quats, grad_scales) from the launchers."""
    n = inputs[0].shape[0]
    d_in = [cupy.asarray(v) for v in inputs]
    d_opacities = cupy.asarray(opacities)
    outs = [cupy.full((n, 2), np.nan, np.float32), cupy.full((n, 3), np.nan, np.float32),
            cupy.full(n, np.nan, np.float32), cupy.full((n, 2), -1, np.int32)]
    grads = [cupy.full((n, 3), np.nan, np.float32), cupy.full((n, 4), np.nan, np.float32),
             cupy.full((n, 3), np.nan, np.float32)]
    d_cots = [cupy.asarray(c) for c in cots]
    s = stream_ptr(cupy)
    f = ctypes.c_float
    size = [ctypes.c_int64(n), ctypes.c_int(width), ctypes.c_int(height), f(ATTRS[0]), f(ATTRS[1]), f(ATTRS[2])]
    check(lib.metal_ops_gaussian_project_forward(*[dptr(v) for v in d_in[:3] + [d_opacities] + d_in[3:]], *size,
                                                 *[dptr(v) for v in outs], s))
    check(lib.metal_ops_gaussian_project_backward(*[dptr(v) for v in d_cots + d_in + [outs[3]]], *size,
                                                  *[dptr(v) for v in grads], s))
    cupy.cuda.get_current_stream().synchronize()
    return [cupy.asnumpy(v) for v in outs], [cupy.asnumpy(v) for v in grads]


@pytest.mark.parametrize("n,width,height", [(1, 64, 48), (257, 64, 48), (100_000, 800, 600)])
def test_matches_numpy(n, width, height):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(n)
    inputs = scene(rng, n, width, height)
    cots = [rng.normal(size=s).astype(np.float32) for s in ((n, 2), (n, 3), (n,))]
    opacities = rng.uniform(0.5 / 255, 1, n).astype(np.float32)
    opacities[::50] = np.nan
    outs, grads = run(cupy, lib, inputs, opacities, cots, width, height)
    means2d, conics, depths, radii = ref.project(*inputs, width, height, opacities=opacities)
    np.testing.assert_array_equal(outs[3] > 0, radii > 0)
    assert np.all(np.abs(outs[3] - radii) <= 1)
    keep = radii[:, 0] > 0
    np.testing.assert_allclose(outs[0][keep], means2d[keep], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(outs[2][keep], depths[keep], rtol=1e-5)
    scale = np.abs(conics[keep]).max(axis=1, keepdims=True)
    np.testing.assert_allclose(outs[1][keep] / scale, conics[keep] / scale, atol=1e-3)
    if n <= 1000:
        for got, want in zip(grads, ref.vjp(inputs, cots, width, height, opacities=opacities)):
            scale = np.abs(want).max(axis=1, keepdims=True) + 1e-3
            np.testing.assert_allclose(got / scale, want / scale, atol=2e-3)


def test_check_finds_the_first_bad_gaussian():
    cupy, lib = require_gpu()
    means, quats, scales, _, _ = scene(np.random.default_rng(0), 1000)
    quats[700] = 0
    scales[500, 1] = -1
    word = cupy.zeros(1, cupy.uint64)
    check(lib.metal_ops_gaussian_project_check(dptr(cupy.asarray(means)), dptr(cupy.asarray(quats)),
                                               dptr(cupy.asarray(scales)), ctypes.c_int64(1000), dptr(word),
                                               stream_ptr(cupy)))
    assert int(word.get()[0]) == 500


def test_empty():
    cupy, lib = require_gpu()
    empty_cots = [np.zeros((0, 2), np.float32), np.zeros((0, 3), np.float32), np.zeros(0, np.float32)]
    outs, grads = run(cupy, lib, scene(np.random.default_rng(0), 0), np.zeros(0, np.float32), empty_cots, 64, 48)
    assert outs[0].shape == (0, 2) and grads[1].shape == (0, 4)
