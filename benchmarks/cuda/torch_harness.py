"""The C-ABI CUDA harness (build/libmetal_ops_cuda.so, `make cuda-harness`)
driven with PyTorch tensors, for the benchmarks in benchmarks/cuda."""
import ctypes
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
lib = ctypes.CDLL(os.path.join(ROOT, "build", "libmetal_ops_cuda.so"))


def p(t):
    """Device pointer of a tensor."""
    return ctypes.c_void_p(t.data_ptr())


def stream():
    """PyTorch's current CUDA stream, for the launchers."""
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
