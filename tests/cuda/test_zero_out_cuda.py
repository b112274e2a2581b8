"""ZeroOut CUDA kernel vs NumPy through the harness (GPU machines only)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import zero_out as reference

DTYPES = {"int32": np.int32, "int64": np.int64, "float32": np.float32, "float64": np.float64}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("n,preserve", [(1, 0), (1000, 999), (1000, 3), (10**7, 123456), (0, 5)])
def test_zero_out_matches_numpy(dtype, n, preserve):
    cupy, lib = require_gpu()
    x = (np.arange(n) % 97 + 1).astype(DTYPES[dtype])
    d_in = cupy.asarray(x)
    d_out = cupy.full_like(d_in, 7)
    fn = getattr(lib, f"metal_ops_zero_out_{dtype}")
    check(fn(dptr(d_in), dptr(d_out), ctypes.c_int64(n), ctypes.c_int64(preserve), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(d_out), reference.zero_out(x, preserve))
