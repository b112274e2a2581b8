"""SHEncode CUDA kernels (shared-memory tiles of 256 directions) vs the NumPy
reference (tests/reference/sh_encode.py) through the harness (GPU machines
only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import sh_encode as ref

TOL = {np.float32: 2e-6, np.float16: 2e-3}


def directions(rng, n, dtype):
    d = rng.normal(size=(n, 3)) * rng.uniform(0.1, 2.0, size=(n, 1))
    return np.ascontiguousarray(d.astype(dtype))


def run(cupy, lib, dirs, upstream, degree):
    """(values, grad_dirs) from the forward and backward launchers."""
    name = "float16" if dirs.dtype == np.float16 else "float32"
    n = dirs.shape[0]
    d_dirs, d_up = cupy.asarray(dirs), cupy.asarray(upstream)
    d_values = cupy.full((n, degree * degree), np.nan, dirs.dtype)
    d_grad = cupy.full((n, 3), np.nan, dirs.dtype)
    s = stream_ptr(cupy)
    check(getattr(lib, f"metal_ops_sh_encode_forward_{name}")(dptr(d_dirs), dptr(d_values), ctypes.c_int64(n),
                                                              ctypes.c_int(degree), s))
    check(getattr(lib, f"metal_ops_sh_encode_backward_{name}")(dptr(d_up), dptr(d_dirs), dptr(d_grad),
                                                               ctypes.c_int64(n), ctypes.c_int(degree), s))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_values), cupy.asnumpy(d_grad)


def check_case(cupy, lib, rng, n, degree, dtype):
    dirs = directions(rng, n, dtype)
    upstream = np.ascontiguousarray(rng.uniform(-1, 1, size=(n, degree * degree)).astype(dtype))
    values, grad = run(cupy, lib, dirs, upstream, degree)
    want, want_grad = ref.values(dirs, degree), ref.vjp(dirs, upstream, degree)
    tol = TOL[dtype]
    np.testing.assert_allclose(values.astype(np.float64), want, rtol=tol,
                               atol=tol * max(1.0, np.abs(want).max(initial=0)))
    np.testing.assert_allclose(grad.astype(np.float64), want_grad, rtol=tol,
                               atol=tol * max(1.0, np.abs(want_grad).max(initial=0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("degree", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 3, 255, 256, 257, 1000, 98_304, 300_001])
def test_matches_numpy(dtype, degree, n):
    cupy, lib = require_gpu()
    check_case(cupy, lib, np.random.default_rng(n * 10 + degree), n, degree, dtype)


@pytest.mark.parametrize("degree", [1, 4])
def test_empty(degree):
    cupy, lib = require_gpu()
    values, grad = run(cupy, lib, np.zeros((0, 3), np.float32), np.zeros((0, degree * degree), np.float32), degree)
    assert values.shape == (0, degree * degree) and grad.shape == (0, 3)


def test_special_values_propagate_like_numpy():
    cupy, lib = require_gpu()
    dirs = np.array([[0, 0, 0], [np.nan, 0.5, 0.5], [np.inf, 0, 0], [0, -np.inf, 1], [1e3, -2e3, 5e2]], np.float32)
    values, _ = run(cupy, lib, dirs, np.ones((5, 16), np.float32), 4)
    with np.errstate(invalid="ignore", over="ignore"):
        want = ref.values(dirs, 4)
    np.testing.assert_array_equal(np.isnan(values), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(values[finite], want[finite], rtol=2e-6)


@pytest.mark.parametrize("degree", [0, 5])
def test_bad_degree_is_an_error(degree):
    cupy, lib = require_gpu()
    d = cupy.zeros((4, 3), cupy.float32)
    out = cupy.zeros((4, 16), cupy.float32)
    err = lib.metal_ops_sh_encode_forward_float32(dptr(d), dptr(out), ctypes.c_int64(4), ctypes.c_int(degree),
                                                  stream_ptr(cupy))
    assert err != 0
