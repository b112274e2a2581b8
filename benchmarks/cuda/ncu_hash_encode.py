"""One forward and one backward (table gradient) at N = 2^20 on the standard
grid, for Nsight Compute:

    ncu --kernel-name regex:HashEncode --metrics gpu__time_duration.sum,lts__t_sectors.sum,\
lts__t_sectors_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_op_red.sum,\
l1tex__t_sector_hit_rate.pct,\
lts__throughput.avg.pct_of_peak_sustained_elapsed python3 -m benchmarks.cuda.ncu_hash_encode

The argument levels_per_block (0 = default) selects the level grouping.
"""
import sys


import numpy as np  # noqa: E402

from benchmarks.cuda.bench_hash_encode_cuda import Runner, load  # noqa: E402

if __name__ == "__main__":
    cupy, lib = load()
    for g in [int(a) for a in sys.argv[1:]] or [0]:
        r = Runner(cupy, lib, 2 ** 20, np.float32)
        r.forward(levels_per_block=g)
        r.backward(levels_per_block=g)
        cupy.cuda.get_current_stream().synchronize()
    print("done")
