"""One forward and one backward (table gradient) at N = 2^20 on the standard
grid, for Nsight Compute; with --tcnn, tiny-cuda-nn's GridEncoding on the same
table and points (its output in its own [features, N] layout) after ours:

    ncu --kernel-name regex:'HashEncode|kernel_grid' --metrics gpu__time_duration.sum,lts__t_sectors.sum,\
lts__t_sectors_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_op_red.sum,\
l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,\
lts__throughput.avg.pct_of_peak_sustained_elapsed python3 -m benchmarks.cuda.ncu_hash_encode \
[--dtype float16] [--tcnn build/libtcnn_grid_shim.so] [levels_per_block ...]

levels_per_block (0 = the default) selects our level grouping.
"""
import argparse
import ctypes

import numpy as np

from benchmarks.cuda.bench_hash_encode_cuda import Runner, load

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("groups", nargs="*", type=int, default=[0])
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--log2n", type=int, default=20)
    parser.add_argument("--tcnn", default=None, help="tiny-cuda-nn grid shim (build_tcnn_shim.sh grid)")
    args = parser.parse_args()
    cupy, lib = load()
    dtype = np.dtype(args.dtype).type
    r = None
    for g in args.groups:
        r = Runner(cupy, lib, 2 ** args.log2n, dtype)
        r.forward(levels_per_block=g)
        r.backward(levels_per_block=g)
    if args.tcnn:
        from benchmarks.cuda.ab_hash_encode_tcnn import grid_with_our_table, load_tcnn
        tc = load_tcnn(args.tcnn)
        h = grid_with_our_table(tc, r, dtype)
        out = cupy.empty((r.out.shape[1], r.n), dtype)
        dy = cupy.ascontiguousarray(r.dy.T)
        sp = ctypes.c_void_p(cupy.cuda.get_current_stream().ptr)
        assert tc.tcnn_grid_forward_backward(h, r.x.data.ptr, out.data.ptr, dy.data.ptr, r.n, 1, sp) == 0
        cupy.cuda.get_current_stream().synchronize()
        tc.tcnn_grid_destroy(h)
    cupy.cuda.get_current_stream().synchronize()
    print("done")
