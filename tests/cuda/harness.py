"""ctypes access to build/libmetal_ops_cuda.so, the C-ABI CUDA harness.

Runs where a GPU, CuPy and the harness exist (`make cuda-harness`
then `pytest tests/cuda`); elsewhere every CUDA test skips and says why.
"""
import ctypes
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# METAL_OPS_CUDA_HARNESS: another build of it (e.g. `make cuda12-harness`'s).
HARNESS_PATH = os.environ.get("METAL_OPS_CUDA_HARNESS") or os.path.join(ROOT, "build", "libmetal_ops_cuda.so")


def require_gpu():
    """Returns (cupy, harness CDLL) or skips the test with the reason."""
    try:
        import cupy
    except ImportError:
        pytest.skip("CuPy is not installed: CUDA harness tests run on a GPU machine")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA GPU present")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA GPU: {e}")
    if not os.path.exists(HARNESS_PATH):
        pytest.skip(f"{HARNESS_PATH} missing: run `make cuda-harness` on the GPU machine")
    return cupy, ctypes.CDLL(HARNESS_PATH)


def dptr(array):
    """Device pointer of a CuPy array."""
    return ctypes.c_void_p(array.data.ptr)


def stream_ptr(cupy):
    return ctypes.c_void_p(cupy.cuda.get_current_stream().ptr)


def check(err):
    assert err == 0, f"CUDA launcher returned error code {err}"
