"""HashEncode CUDA kernels vs tiny-cuda-nn's GridEncoding, side by side in one process.

Standard NeRF grid (D=3, L=16, F=2, log2 T=19, base 16, finest 2048), uniform
random points, float32 and float16 tables, N = 2^20 and 2^22. tiny-cuda-nn runs
through benchmarks/cuda/tcnn_grid_shim.cu (its GridEncodingTemplated, coherent
prime hash, linear interpolation, the defaults of its "HashGrid"), built with
its CMake defaults (--use_fast_math, sm_90):

    TCNN_DIR=/path/to/tiny-cuda-nn sh benchmarks/cuda/build_tcnn_shim.sh grid
    make cuda-harness && python3 -m benchmarks.cuda.ab_hash_encode_tcnn [--out PATH]

tiny-cuda-nn is timed in both output layouts: "soa" ([features, N], what its
kernels write; its best case) and "aos" ([N, features], ours, through its own
transpose). Both libraries read the same table (copied; the row layouts agree)
and the same points, and the outputs and table gradients are compared before
timing. Backward = the table gradient for a given dL/dy (no input gradient);
tiny-cuda-nn's float16 path accumulates it with half2 atomics, ours in float32.
Each round times every contender (CUDA events around a batch of back-to-back
calls); reported: medians over rounds and the median of per-round ratios.
"""
import argparse
import ctypes
import os
import statistics

import numpy as np

from benchmarks import timing
from benchmarks.cuda.bench_hash_encode_cuda import DIMS, FEATURES, GRID, ROOT, Runner

TARGETS = {("float16", "forward"): 1.2, ("float16", "forward_backward"): 1.5, ("float32", "forward_backward"): 2.5}


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "hash_encode_tcnn.h100": ("HashEncode CUDA against tiny-cuda-nn's GridEncoding",
                              "The standard grid (16 levels, 2^19 rows, 2 features), same table and points, outputs "
                              "checked equal first; tiny-cuda-nn in both output layouts, `--use_fast_math` build.",
                              [("log2 N", "log2n"), ("dtype", "dtype"), ("pass", "case"), ("ours ms", "ours_ms"),
                               ("tcnn SoA ms", "tcnn_soa_ms"), ("tcnn AoS ms", "tcnn_aos_ms"),
                               ("x tcnn best", "speedup_vs_tcnn_best")]),
}


def load_tcnn(path):
    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)  # the shim's driver-API symbols
    tc = ctypes.CDLL(path)
    tc.tcnn_grid_create.restype = ctypes.c_void_p
    tc.tcnn_grid_create.argtypes = [ctypes.c_int] * 4 + [ctypes.c_float]
    for name in ("tcnn_grid_params", "tcnn_grid_gradients"):
        getattr(tc, name).restype = ctypes.c_void_p
        getattr(tc, name).argtypes = [ctypes.c_void_p]
    tc.tcnn_grid_n_params.restype = ctypes.c_longlong
    tc.tcnn_grid_n_params.argtypes = [ctypes.c_void_p]
    tc.tcnn_grid_forward.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    tc.tcnn_grid_forward_backward.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    tc.tcnn_grid_destroy.argtypes = [ctypes.c_void_p]
    return tc


def grid_with_our_table(tc, runner, dtype):
    """A tiny-cuda-nn grid (standard grid, `dtype` table) holding the runner's table."""
    h = tc.tcnn_grid_create(0 if dtype == np.float32 else 1, GRID["num_levels"], GRID["log2_hashmap_size"],
                            GRID["base_resolution"], GRID["per_level_scale"])
    assert h, "tcnn_grid_create failed"
    n_params = tc.tcnn_grid_n_params(h)
    if n_params != runner.table.size:
        raise SystemExit(f"tiny-cuda-nn's table has {n_params} parameters, ours {runner.table.size}: "
                         "the row layouts differ, the comparison would not be like for like")
    import cupy
    cupy.cuda.runtime.memcpy(tc.tcnn_grid_params(h), runner.table.data.ptr, runner.table.nbytes, 3)
    return h


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tcnn", default=os.path.join(ROOT, "build", "libtcnn_grid_shim.so"))
    parser.add_argument("--log2n", default="20,22")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", default=None, help="the JSON (default benchmarks/results/hash_encode_tcnn.<gpu>.json)")
    args = parser.parse_args()
    import cupy
    from tests.cuda.harness import bind_hash_encode

    lib = bind_hash_encode(ctypes.CDLL(os.path.join(ROOT, "build", "libmetal_ops_cuda.so")))
    tc = load_tcnn(args.tcnn)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    clock = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrClockRate, 0) / 1e3
    print(f"device: {device} ({clock:.0f} MHz max SM clock), CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
          f"driver {cupy.cuda.runtime.driverGetVersion()}; grid {GRID}; {args.rounds} interleaved rounds")
    results = {"device": device, "grid": dict(GRID, input_dim=DIMS, features=FEATURES), "rounds": args.rounds,
               "method": "per round, CUDA events around a batch of back-to-back calls of each contender in turn; "
                         "medians over rounds, speedups are medians of per-round ratios", "rows": []}
    stream = cupy.cuda.get_current_stream()
    sp = ctypes.c_void_p(stream.ptr)
    for log2n in (int(v) for v in args.log2n.split(",")):
        n = 2 ** log2n
        batch = max(3, (2 ** 22 // n) * 3)
        for dtype in (np.float32, np.float16):
            dname = np.dtype(dtype).name
            r = Runner(cupy, lib, n, dtype)
            h = grid_with_our_table(tc, r, dtype)
            width = GRID["num_levels"] * FEATURES
            t_soa = cupy.empty((width, n), dtype)
            t_aos = cupy.empty((n, width), dtype)
            dy_soa = cupy.ascontiguousarray(r.dy.T)
            x = r.x

            # Same inputs, same answers: outputs and table gradients against ours.
            r.forward()
            assert tc.tcnn_grid_forward_backward(h, x.data.ptr, t_soa.data.ptr, dy_soa.data.ptr, n, 1, sp) == 0
            r.backward()
            grad_tc = cupy.ndarray(r.table.shape, dtype, cupy.cuda.MemoryPointer(
                cupy.cuda.UnownedMemory(tc.tcnn_grid_gradients(h), r.table.nbytes, None), 0))
            ours_y, theirs_y = cupy.asnumpy(r.out).astype(np.float64), cupy.asnumpy(t_soa).T.astype(np.float64)
            ours_g, theirs_g = cupy.asnumpy(r.grad_table).astype(np.float64), cupy.asnumpy(grad_tc).astype(np.float64)
            tol_y, tol_g = (1e-5, 1e-4) if dtype == np.float32 else (2e-3, 5e-2)
            lv_err = np.abs(ours_y - theirs_y).reshape(n, GRID["num_levels"], FEATURES).max(axis=(0, 2))
            g_err = float(np.max(np.abs(ours_g - theirs_g)) / max(np.max(np.abs(ours_g)), 1e-30))
            differing = [int(i) for i in np.nonzero(lv_err > tol_y)[0]]
            print(f"N=2^{log2n} {dname}: max |ours - tcnn| forward {lv_err.max():.2e} (levels beyond {tol_y:g}: "
                  f"{differing or 'none'}), table gradient (relative to its max) {g_err:.2e}", flush=True)
            # A level can differ where tiny-cuda-nn's in-kernel exp2 picks another
            # resolution than the correctly rounded host value (docs/HASH_ENCODE_GPU.md);
            # the work per level is the same then. Anything more is not the same encoding.
            if len(differing) > 2 or (not differing and g_err > tol_g):
                raise SystemExit("the two libraries disagree beyond rounding: not the same encoding")
            results.setdefault("agreement", []).append(dict(
                log2n=log2n, dtype=dname, forward_max_abs_per_level=[float(v) for v in lv_err],
                table_gradient_max_rel=g_err))

            def tc_fwd(out, soa):
                assert tc.tcnn_grid_forward(h, x.data.ptr, out.data.ptr, n, soa, sp) == 0

            def tc_fb(out, dy, soa):
                assert tc.tcnn_grid_forward_backward(h, x.data.ptr, out.data.ptr, dy.data.ptr, n, soa, sp) == 0

            cases = {
                "forward": {"ours": r.forward, "tcnn_soa": lambda: tc_fwd(t_soa, 1),
                            "tcnn_aos": lambda: tc_fwd(t_aos, 0)},
                "forward_backward": {"ours": lambda: (r.forward(), r.backward()),
                                     "tcnn_soa": lambda: tc_fb(t_soa, dy_soa, 1),
                                     "tcnn_aos": lambda: tc_fb(t_aos, r.dy, 0)},
            }
            for case, fns in cases.items():
                samples = {k: [] for k in fns}
                for fn in fns.values():
                    timing.cuda_median_ms(cupy, fn, 1, warmup=2, batch=batch)
                for _ in range(args.rounds):
                    for k, fn in fns.items():
                        samples[k].append(timing.cuda_median_ms(cupy, fn, 1, warmup=0, batch=batch))
                row = {"log2n": log2n, "dtype": dname, "case": case}
                line = f"N=2^{log2n} {dname:8s} {case:17s}"
                for k, v in samples.items():
                    row[f"{k}_ms"] = statistics.median(v)
                    line += f"  {k} {row[f'{k}_ms']:.4f} ms"
                for k in ("tcnn_soa", "tcnn_aos"):
                    row[f"speedup_vs_{k}"] = statistics.median(t / o for t, o in zip(samples[k], samples["ours"]))
                row["speedup_vs_tcnn_best"] = min(row["speedup_vs_tcnn_soa"], row["speedup_vs_tcnn_aos"])
                row["points_per_s"] = n / row["ours_ms"] * 1e3
                target = TARGETS.get((dname, case))
                if target:
                    row["target"] = target
                line += f"  ours vs best x{row['speedup_vs_tcnn_best']:.3f}" + (f" (target x{target})" if target else "")
                print(line, flush=True)
                results["rows"].append(row)
            tc.tcnn_grid_destroy(h)
            del r, t_soa, t_aos, dy_soa
            cupy.get_default_memory_pool().free_all_blocks()
    timing.write_json(args.out or timing.result_path("hash_encode_tcnn", timing.device_label(device)), results)


if __name__ == "__main__":
    main()
