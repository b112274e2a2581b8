"""ctypes access to build/libmetal_shim.so: the .metal shaders compiled as C++.

`make metal-shim` (part of `make test`) builds it. Each op's shim .cc exports
`shim_<op>_<dtype>(...)` functions that run one shader over its dispatch grid.
METAL_OPS_SHIM_LIB names another build of it (e.g. one compiled elsewhere).
"""
import ctypes
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM_PATH = os.environ.get("METAL_OPS_SHIM_LIB", os.path.join(ROOT, "build", "libmetal_shim.so"))
# The dtype codes the templated shaders' runners take (0 float32, 1 float16).
DTYPE_CODES = {np.float32: 0, np.float16: 1}


def load_shim():
    if not os.path.exists(os.path.join(ROOT, "kernels", "metal_plan")):
        pytest.skip("the MSL shim compiles the tree's Metal shaders: needs the source tree "
                    "(this suite runs against an installed package)")
    if not os.path.exists(SHIM_PATH):
        pytest.fail(f"{SHIM_PATH} is missing: run `make metal-shim` (make test does)")
    return ctypes.CDLL(SHIM_PATH)


def load_shim_functions(argtypes, restype=ctypes.c_int32):
    """load_shim(), with the argument types of the functions named in
    `argtypes` ({name: [ctypes types]}) set and their return type `restype`."""
    lib = load_shim()
    for name, types in argtypes.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = types, restype
    return lib


def load_point_op(op):
    """The runners of a per-point op with one int attribute (a degree, or an
    enumerated attribute's index): shim_<op>_forward(dtype code, x, y, n, attribute,
    grid) and shim_<op>_backward(dtype code, grad, x, dx, n, attribute, grid)."""
    i32, i64_, u32_, vp = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_void_p
    return load_shim_functions({f"shim_{op}_forward": [i32, vp, vp, i64_, i32, u32_],
                                f"shim_{op}_backward": [i32, vp, vp, vp, i64_, i32, u32_]})


def ptr(array):
    """A void* to a C-contiguous NumPy array's data."""
    assert array.flags["C_CONTIGUOUS"], "shim calls need C-contiguous arrays"
    return ctypes.c_void_p(array.ctypes.data)


def i64(value):
    return ctypes.c_int64(int(value))


def u32(value):
    return ctypes.c_uint32(int(value))


def f32(value):
    return ctypes.c_float(float(value))


def empty_like_c(array, dtype=None):
    return np.ascontiguousarray(np.empty_like(array, dtype=dtype))
