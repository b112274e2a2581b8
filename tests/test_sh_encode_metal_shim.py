"""SHEncode Metal shaders, run on the CPU through the MSL shim, vs NumPy.

kernels/sh_encode/sh_encode.metal is compiled as C++ (tests/metal_shim/msl_shim.h)
into build/libmetal_shim.so by `make metal-shim` (part of `make test`);
tests/metal_shim/sh_encode_shim.cc runs each entry point over its dispatch
grid. The reference is tests/reference/sh_encode.py. This checks the shaders'
arithmetic and indexing, not Metal's memory model or the .mm host code (which
needs a Mac).
"""
import numpy as np
import pytest

from tests.metal_shim.shim import DTYPE_CODES, load_point_op, ptr
from tests.reference import sh_encode as ref

pytestmark = pytest.mark.source_tree("the Metal shaders (MSL shim)")

TOL = {np.float32: 2e-6, np.float16: 2e-3}


@pytest.fixture(scope="module")
def shim():
    return load_point_op("sh_encode")


def run(shim, dirs, upstream, degree, grid):
    n = dirs.shape[0]
    values = np.full((n, degree * degree), 7, dirs.dtype)
    grad = np.full((n, 3), 7, dirs.dtype)
    code = DTYPE_CODES[dirs.dtype.type]
    assert shim.shim_sh_encode_forward(code, ptr(dirs), ptr(values), n, degree, grid) == 0
    assert shim.shim_sh_encode_backward(code, ptr(upstream), ptr(dirs), ptr(grad), n, degree, grid) == 0
    return values, grad


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("degree", [1, 2, 3, 4])
@pytest.mark.parametrize("n,grid", [(1, 1), (37, 8), (1000, 256), (300, 4096), (0, 16)])
def test_shaders_match_numpy(shim, dtype, degree, n, grid):
    rng = np.random.default_rng(degree * 100 + n)
    dirs = rng.normal(size=(n, 3)) * rng.uniform(0.1, 2.0, size=(n, 1))
    dirs = np.ascontiguousarray(dirs.astype(dtype))
    upstream = np.ascontiguousarray(rng.uniform(-1, 1, size=(n, degree * degree)).astype(dtype))
    values, grad = run(shim, dirs, upstream, degree, grid)
    want = ref.values(dirs, degree)
    want_grad = ref.vjp(dirs, upstream, degree)
    tol = TOL[dtype]
    np.testing.assert_allclose(values.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max(initial=0)))
    np.testing.assert_allclose(grad.astype(np.float64), want_grad, rtol=tol,
                               atol=tol * max(1.0, np.abs(want_grad).max(initial=0)))


def test_bad_degree_is_refused(shim):
    d = np.zeros((1, 3), np.float32)
    assert shim.shim_sh_encode_forward(0, ptr(d), ptr(d), 1, 5, 1) == 1
