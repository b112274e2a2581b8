"""One training forward and one backward (dx and every weight and bias
gradient) of FusedMLP at N = 2^20 through the harness, for Nsight Compute:
where the forward + backward time goes, kernel by kernel, and what bounds each
(tensor pipe, memory, occupancy):

    ncu --metrics gpu__time_duration.sum,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
python3 -m benchmarks.cuda.ncu_fused_mlp [--dtype float16|float32|tf32] [--config w64_in64_h4_out64]

Networks are benchmarks/cuda/bench_fused_mlp_cuda.py's (ReLU hidden, linear output).
"""
import argparse
import ctypes

import numpy as np

from benchmarks.fused_mlp_networks import CONFIGS
from tests.activation_codes import activation_code
from tests.cuda.harness import (check, dptr, fused_mlp_entry, fused_mlp_net, fused_mlp_workspace, pointer_array,
                                stream_ptr)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", choices=["float16", "float32", "tf32"], default="float16")
    parser.add_argument("--config", choices=[c[0] for c in CONFIGS], default=CONFIGS[0][0])
    parser.add_argument("--log2n", type=int, default=20)
    args = parser.parse_args()
    import cupy
    lib = ctypes.CDLL("build/libmetal_ops_cuda.so")
    lib.metal_ops_fused_mlp_workspace_bytes.restype = ctypes.c_int64
    _, in_dim, width, hidden, out_dim = next(c for c in CONFIGS if c[0] == args.config)
    tf32 = args.dtype == "tf32"
    dtype = np.float32 if tf32 else np.dtype(args.dtype).type
    n = 2 ** args.log2n
    rng = np.random.default_rng(0)
    ws, bs = fused_mlp_net(rng, in_dim, width, hidden, out_dim, dtype)
    x = cupy.asarray(rng.uniform(-1, 1, (n, in_dim)).astype(dtype))
    dw, db = [cupy.asarray(w) for w in ws], [cupy.asarray(b) for b in bs]
    y, saved = cupy.empty((n, out_dim), dtype), cupy.empty((hidden, n, width), dtype)
    dy = cupy.asarray(rng.standard_normal((n, out_dim)).astype(dtype))
    dx, gw, gb = cupy.empty_like(x), [cupy.empty_like(w) for w in dw], [cupy.empty_like(b) for b in db]
    wsb = fused_mlp_workspace(cupy, lib, n, in_dim, width, hidden, out_dim, dtype, tf32)
    shape = (ctypes.c_int64(n), in_dim, width, hidden, out_dim, activation_code("relu"),
             activation_code("none"), ctypes.c_float(0.0), stream_ptr(cupy))
    fwd = fused_mlp_entry(lib, "forward", dtype, tf32, 0)
    bwd = fused_mlp_entry(lib, "backward", dtype, tf32, 0)
    wp, bp, gwp, gbp = pointer_array(dw), pointer_array(db), pointer_array(gw), pointer_array(gb)
    check(fwd(dptr(x), wp, bp, dptr(y), dptr(saved), *shape))
    check(bwd(dptr(dy), dptr(x), dptr(y), dptr(saved), wp, bp, dptr(dx), gwp, gbp, dptr(wsb), *shape))
    cupy.cuda.get_current_stream().synchronize()
    print(f"ncu_fused_mlp: {args.config} {args.dtype} N={n}: forward + backward done")
