"""SceneContract Metal shaders, run on the CPU through the MSL shim, vs NumPy.

kernels/scene_contract/scene_contract.metal is compiled as C++ (tests/metal_shim/msl_shim.h)
into build/libmetal_shim.so by `make metal-shim` (part of `make test`);
tests/metal_shim/scene_contract_shim.cc runs each entry point over its
dispatch grid. The reference is tests/reference/scene_contract.py. This
checks the shaders' arithmetic and indexing, not Metal's memory model or the
host path (tests/test_metal_plans.py runs that on the strict model).
"""
import numpy as np
import pytest

from tests.metal_shim.shim import DTYPE_CODES, load_point_op, ptr
from tests.reference import scene_contract as ref

pytestmark = pytest.mark.source_tree("the Metal shaders (MSL shim)")

NORMS = {"l2": 0, "linf": 1}  # kernels/scene_contract/scene_contract.h SceneContractNorm
SPECIAL = np.array([[0, 0, 0], [1, 0, 0], [0.6, 0.8, 0], [1, 1, 1], [2, 0, 0], [3e38, -3e38, 3e38], [1e20, 1, -1],
                    [np.inf, 0, 0], [-np.inf, np.inf, 5], [np.nan, 0, 0], [1, 2, np.nan]])


@pytest.fixture(scope="module")
def shim():
    return load_point_op("scene_contract")


def run(shim, x, grad, norm, grid):
    n = x.shape[0]
    y, dx = np.full_like(x, 7), np.full_like(x, 7)
    code = DTYPE_CODES[x.dtype.type]
    assert shim.shim_scene_contract_forward(code, ptr(x), ptr(y), n, NORMS[norm], grid) == 0
    assert shim.shim_scene_contract_backward(code, ptr(grad), ptr(x), ptr(dx), n, NORMS[norm], grid) == 0
    return y, dx


@pytest.mark.parametrize("dtype", list(DTYPE_CODES))
@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("n,grid", [(1, 1), (37, 8), (1000, 256), (300, 4096), (0, 16)])
def test_shaders_match_numpy(shim, dtype, norm, n, grid):
    rng = np.random.default_rng(n + NORMS[norm])
    scale = np.exp(rng.uniform(-3, 9 if dtype == np.float32 else 6, (n, 1)))
    x = np.ascontiguousarray((rng.normal(size=(n, 3)) * scale).astype(dtype))
    grad = np.ascontiguousarray(rng.uniform(-1, 1, (n, 3)).astype(dtype))
    y, dx = run(shim, x, grad, norm, grid)
    ref.assert_like(y, ref.forward(x, norm), dtype)
    ref.assert_like(dx, ref.vjp(x, grad, norm), dtype)


@pytest.mark.parametrize("norm", list(NORMS))
def test_special_points(shim, norm):
    x = SPECIAL.astype(np.float32)
    grad = np.ascontiguousarray(np.random.default_rng(1).uniform(-1, 1, x.shape).astype(np.float32))
    y, dx = run(shim, x, grad, norm, 4)
    ref.assert_like(y, ref.forward(x, norm), np.float32)
    ref.assert_like(dx, ref.vjp(x, grad, norm), np.float32)


def test_bad_norm_is_refused(shim):
    x = np.zeros((1, 3), np.float32)
    assert shim.shim_scene_contract_forward(0, ptr(x), ptr(x), 1, 2, 1) == 1
