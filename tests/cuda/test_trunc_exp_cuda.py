"""TruncExp CUDA kernels (one thread per element, grid-stride) vs the NumPy
reference (tests/reference/trunc_exp.py) through the harness (GPU machines
only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import trunc_exp as ref

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, 15.0, -15.0, 16.0, -16.0, 88.0, 89.0, -104.0, -110.0])


def run(cupy, lib, x, dy):
    """(y, dx) from the forward and backward launchers."""
    name = "float16" if x.dtype == np.float16 else "float32"
    n = x.size
    d_x, d_dy = cupy.asarray(x), cupy.asarray(dy)
    d_y, d_dx = cupy.full(n, np.nan, x.dtype), cupy.full(n, np.nan, x.dtype)
    s = stream_ptr(cupy)
    check(getattr(lib, f"metal_ops_trunc_exp_forward_{name}")(dptr(d_x), dptr(d_y), ctypes.c_int64(n), s))
    check(getattr(lib, f"metal_ops_trunc_exp_backward_{name}")(dptr(d_dy), dptr(d_x), dptr(d_dx), ctypes.c_int64(n),
                                                               s))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_y), cupy.asnumpy(d_dx)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 100_000, 3_000_001])
def test_matches_numpy(dtype, n):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(n)
    bound = 20.0 if dtype == np.float32 else 10.0
    x = rng.uniform(-bound, bound, n).astype(dtype)
    dy = rng.uniform(-2, 2, n).astype(dtype)
    y, dx = run(cupy, lib, x, dy)
    ref.assert_like(y, ref.forward(x), dtype)
    ref.assert_like(dx, ref.grad(dy, x), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_special_values_like_numpy(dtype):
    cupy, lib = require_gpu()
    x = SPECIAL.astype(dtype)
    dy = np.resize(np.array([1.0, 0.0, -2.0, np.inf, np.nan, 0.5], dtype), x.shape)
    y, dx = run(cupy, lib, x, dy)
    ref.assert_like(y, ref.forward(x), dtype)
    ref.assert_like(dx, ref.grad(dy, x), dtype)


def test_empty():
    cupy, lib = require_gpu()
    y, dx = run(cupy, lib, np.zeros(0, np.float32), np.zeros(0, np.float32))
    assert y.shape == (0,) and dx.shape == (0,)
