"""SceneContract CUDA kernels (one thread per point, grid-stride) vs the NumPy
reference (tests/reference/scene_contract.py) through the harness (GPU
machines only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import scene_contract as ref

NORMS = {"l2": 0, "linf": 1}  # kernels/scene_contract/scene_contract.h SceneContractNorm
SPECIAL = np.array([[0, 0, 0], [1, 0, 0], [0.6, 0.8, 0], [1, 1, 1], [2, 0, 0], [3e38, -3e38, 3e38], [1e20, 1, -1],
                    [np.inf, 0, 0], [-np.inf, np.inf, 5], [np.nan, 0, 0], [1, 2, np.nan]])


def run(cupy, lib, x, grad, norm):
    """(y, dx) from the forward and backward launchers."""
    name = "float16" if x.dtype == np.float16 else "float32"
    n = x.shape[0]
    d_x, d_g = cupy.asarray(x), cupy.asarray(grad)
    d_y, d_dx = cupy.full(x.shape, np.nan, x.dtype), cupy.full(x.shape, np.nan, x.dtype)
    s, k = stream_ptr(cupy), ctypes.c_int(NORMS[norm])
    check(getattr(lib, f"metal_ops_scene_contract_forward_{name}")(dptr(d_x), dptr(d_y), ctypes.c_int64(n), k, s))
    check(getattr(lib, f"metal_ops_scene_contract_backward_{name}")(dptr(d_g), dptr(d_x), dptr(d_dx),
                                                                    ctypes.c_int64(n), k, s))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_y), cupy.asnumpy(d_dx)


@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 100_000, 3_000_001])
def test_matches_numpy(norm, dtype, n):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(n)
    scale = np.exp(rng.uniform(-3, 9 if dtype == np.float32 else 6, (n, 1)))
    x = (rng.normal(size=(n, 3)) * scale).astype(dtype)
    grad = rng.uniform(-1, 1, (n, 3)).astype(dtype)
    y, dx = run(cupy, lib, x, grad, norm)
    ref.assert_like(y, ref.forward(x, norm), dtype)
    ref.assert_like(dx, ref.vjp(x, grad, norm), dtype)


@pytest.mark.parametrize("norm", list(NORMS))
def test_special_points_like_numpy(norm):
    cupy, lib = require_gpu()
    x = SPECIAL.astype(np.float32)
    grad = np.random.default_rng(1).uniform(-1, 1, x.shape).astype(np.float32)
    y, dx = run(cupy, lib, x, grad, norm)
    ref.assert_like(y, ref.forward(x, norm), np.float32)
    ref.assert_like(dx, ref.vjp(x, grad, norm), np.float32)


def test_empty():
    cupy, lib = require_gpu()
    y, dx = run(cupy, lib, np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), "l2")
    assert y.shape == (0, 3) and dx.shape == (0, 3)
