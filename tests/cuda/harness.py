"""ctypes access to build/libmetal_ops_cuda.so, the C-ABI CUDA harness: the
library, pointers, and the entries' signatures, for tests/cuda and the CUDA
benchmarks (benchmarks/cuda).

Runs where a GPU, CuPy and the harness exist (`make cuda-harness`
then `pytest tests/cuda`); elsewhere every CUDA test skips and says why.
"""
import ctypes
import os

import numpy as np
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


def pointer_array(arrays):
    """An int64 array of the CuPy arrays' device pointers (0 for None)."""
    return (ctypes.c_int64 * max(1, len(arrays)))(*[0 if a is None else a.data.ptr for a in arrays])


# ---- HashEncode
def bind_hash_encode(lib):
    """The library with the argument and return types of HashEncode's entries set."""
    if getattr(lib, "_hash_encode_bound", False):
        return lib
    i32, i64, u32, f32, vp = ctypes.c_int, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float, ctypes.c_void_p
    lib.metal_ops_hash_encode_table_rows.argtypes = [i32, i32, i32, u32, f32]
    lib.metal_ops_hash_encode_table_rows.restype = i64
    lib.metal_ops_hash_encode_forward.argtypes = [vp, vp, vp, i32, i64, i32, i32, i32, i32, u32, f32, i32, i32, vp]
    lib.metal_ops_hash_encode_forward.restype = i32
    lib.metal_ops_hash_encode_backward_workspace_bytes.argtypes = [i32, i64, i32, i32, i32, i32, u32, f32, i32,
                                                                   i32, i32]
    lib.metal_ops_hash_encode_backward_workspace_bytes.restype = i64
    lib.metal_ops_hash_encode_backward.argtypes = [vp, vp, vp, vp, vp, vp, i64, i32, i64, i32, i32, i32, i32, u32,
                                                   f32, i32, i32, i32, i32, i32, i64, vp]
    lib.metal_ops_hash_encode_backward.restype = i32
    lib.metal_ops_hash_encode_forward_tuned.argtypes = [vp, vp, vp, i32, i64, i32, i32, i32, i32, u32, f32, i32, i32,
                                                        i32, vp]
    lib.metal_ops_hash_encode_forward_tuned.restype = i32
    lib.metal_ops_hash_encode_backward_tuned.argtypes = [vp, vp, vp, vp, vp, vp, i64, i32, i64, i32, i32, i32, i32,
                                                         u32, f32, i32, i32, i32, i32, i32, i64, i32, vp]
    lib.metal_ops_hash_encode_backward_tuned.restype = i32
    lib.metal_ops_hash_encode_grad_grad_workspace_bytes.argtypes = [i32, i64, i32, i32, i32, i32, u32, f32, i32]
    lib.metal_ops_hash_encode_grad_grad_workspace_bytes.restype = i64
    lib.metal_ops_hash_encode_grad_grad.argtypes = [vp, vp, vp, vp, vp, vp, vp, i64, i32, i64, i32, i32, i32, i32,
                                                    u32, f32, i32, i32, i32, vp]
    lib.metal_ops_hash_encode_grad_grad.restype = i32
    lib._hash_encode_bound = True
    return lib


# ---- FusedMLP
# The dtype parameter of the FusedMLP calls below: a NumPy dtype, or TF32 by
# name (float32 arrays, the harness's TF32 entry points): "tf32" as the op
# runs it; TF32 through one implementation (kFusedMlpTf32Fused /
# kFusedMlpTf32Layers); the layer path with its staged backward kernels'
# 32-row chunks (what devices with less shared memory than the H100 run), or
# without them (where neither chunk fits): FusedMlpShape::tf32_staged_rows.
TF32 = "tf32"
TF32_FUSED, TF32_LAYERS = "tf32_fused", "tf32_layers"
TF32_LAYERS32, TF32_UNSTAGED = "tf32_layers32", "tf32_unstaged"
# {TF32 name: the implementation the _tf32_impl entry points take}
FUSED_MLP_TF32_IMPL = {TF32: 0, TF32_FUSED: 1, TF32_LAYERS: 2, TF32_LAYERS32: 3, TF32_UNSTAGED: 4}


def fused_mlp_net(rng, in_dim, width, hidden, out_dim, dtype):
    """Glorot-uniform weights and small biases: ([W], [b]) NumPy arrays."""
    dims = [in_dim] + [width] * hidden + [out_dim]
    ws, bs = [], []
    for a, b in zip(dims[:-1], dims[1:]):
        lim = np.sqrt(6.0 / (a + b))
        ws.append(rng.uniform(-lim, lim, (a, b)).astype(dtype))
        bs.append(rng.uniform(-0.1, 0.1, b).astype(dtype))
    return ws, bs


def fused_mlp_suffix(dtype, tf32=False):
    return "tf32" if tf32 else "float16" if dtype == np.float16 else "float32"


def fused_mlp_np_dtype(dtype):
    return np.float32 if dtype in FUSED_MLP_TF32_IMPL else dtype


def fused_mlp_entry(lib, direction, dtype, tf32, impl):
    """The harness function for this dtype and TF32 implementation."""
    if tf32 and impl:
        fn = getattr(lib, f"metal_ops_fused_mlp_{direction}_tf32_impl")
        return lambda *a: fn(*a[:-1], impl, a[-1])
    return getattr(lib, f"metal_ops_fused_mlp_{direction}_{fused_mlp_suffix(dtype, tf32)}")


def fused_mlp_workspace_bytes(lib, n, in_dim, width, hidden, out_dim, dtype, tf32=False, impl=0):
    lib.metal_ops_fused_mlp_workspace_bytes.restype = ctypes.c_int64
    return lib.metal_ops_fused_mlp_workspace_bytes(ctypes.c_int64(n), in_dim, width, hidden, out_dim,
                                                   np.dtype(fused_mlp_np_dtype(dtype)).itemsize, int(tf32), impl)


def fused_mlp_workspace(cupy, lib, n, in_dim, width, hidden, out_dim, dtype, tf32=False, impl=0):
    """Exactly the backward's workspace (compute-sanitizer sees any overrun)."""
    nbytes = fused_mlp_workspace_bytes(lib, n, in_dim, width, hidden, out_dim, dtype, tf32, impl)
    return cupy.empty(max(1, nbytes), cupy.uint8)
