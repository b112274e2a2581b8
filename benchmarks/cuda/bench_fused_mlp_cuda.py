"""FusedMLP CUDA kernels vs tiny-cuda-nn's FullyFusedMLP, side by side in one
process on the GPU (interleaved rounds, medians of per-round ratios).

    make cuda-harness
    TCNN_DIR=/path/to/tiny-cuda-nn sh benchmarks/cuda/build_tcnn_shim.sh   # optional
    python3 -m benchmarks.cuda.bench_fused_mlp_cuda [--tcnn build/libtcnn_mlp_shim.so]

Both run the same shapes with ReLU hidden layers and a linear output; forward
is inference, forward+backward is the training forward plus the backward with
dx and every weight and bias gradient. tiny-cuda-nn runs in both of its input
layouts (AoS = its CM, the layout of our buffers and of its own encodings'
output; SoA = its RM) and each row also reports ours against its faster one.
tiny-cuda-nn's FullyFusedMLP has no float32 path. dtype "float32" is our exact
float32 path (layer by layer through cuBLAS), "tf32" our float32 path on TF32
tensor cores (what the TensorFlow op runs while TensorFlow allows TF32: fully
fused, or layer by layer at width 128), "tf32_fused" / "tf32_layers" TF32
through one implementation at every width. Where PyTorch is
installed, each row also times the same network as a PyTorch nn.Linear stack
(with bias, ReLU between layers; forward+backward computes dx and every
weight and bias gradient): "torch" for float16, and for float32 rows
"torch_tf32" (torch.backends.cuda.matmul.allow_tf32 on) and "torch_strict"
(off); --torch-compile adds the same stacks through torch.compile
("torch_compile", "torch_tf32_compile", "torch_strict_compile").
--base-lib times a second harness build ("base") in the same rounds: ours/base
is the A/B of two kernel versions. Writes
benchmarks/results/fused_mlp_cuda.<gpu>.json (<gpu>: h100, ...; with
--dtypes float32 fused_mlp_cuda_float32.<gpu>.json; with --base-lib nothing
unless --json names a file).
"""
import argparse
import ctypes
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import timing  # noqa: E402
from benchmarks.fused_mlp_networks import CONFIGS  # noqa: E402
from tests.activation_codes import activation_code  # noqa: E402
from tests.cuda.harness import (FUSED_MLP_TF32_IMPL, check, dptr, fused_mlp_entry, fused_mlp_net,  # noqa: E402
                                fused_mlp_suffix, fused_mlp_workspace, pointer_array, stream_ptr)


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "fused_mlp_cuda.h100": ("FusedMLP CUDA against tiny-cuda-nn and PyTorch, N = 2^20",
                            "Through the C-ABI harness, one process: float16 against tiny-cuda-nn's FullyFusedMLP "
                            "(AoS and SoA input layouts, `--use_fast_math` build) and a PyTorch nn.Linear stack; "
                            "`tf32` is the float32 path on TF32 tensor cores (PyTorch with TF32 on).",
                            [("network", "config"), ("dtype", "dtype"), ("pass", "mode"), ("ours ms", "ours_ms"),
                             ("tcnn AoS ms", "tcnn_aos_ms"), ("tcnn SoA ms", "tcnn_soa_ms"), ("PyTorch ms", "torch"),
                             ("x tcnn best", "speedup_vs_tcnn_best"), ("x PyTorch", "x_torch")]),
    "fused_mlp_cuda_float32.h100": ("FusedMLP CUDA, exact float32, N = 2^20",
                                    "The float32 path with TF32 off against PyTorch nn.Linear stacks with TF32 on "
                                    "and off.",
                                    [("network", "config"), ("pass", "mode"), ("ours ms", "ours_ms"),
                                     ("PyTorch TF32 ms", "torch_tf32_ms"), ("PyTorch strict ms", "torch_strict_ms"),
                                     ("x TF32", "speedup_vs_torch_tf32"), ("x strict", "speedup_vs_torch_strict")]),
}


def flops(n, in_dim, width, hidden, out_dim):
    dims = [in_dim] + [width] * hidden + [out_dim]
    return 2.0 * n * sum(a * b for a, b in zip(dims[:-1], dims[1:]))


def add_torch_stack(torch, fns_f, fns_fb, x, ws, bs, dy, reps, compile_too=False):
    """The network as a PyTorch nn.Linear stack on the same data: "torch" for
    float16, "torch_tf32" and "torch_strict" for float32; with compile_too,
    the same through torch.compile (key + "_compile")."""
    dt = torch.float16 if x.dtype == np.float16 else torch.float32
    layers = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        lin = torch.nn.Linear(w.shape[0], w.shape[1], device="cuda", dtype=dt)
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(w.T.copy(), device="cuda"))
            lin.bias.copy_(torch.as_tensor(b, device="cuda"))
        layers += [lin] + ([torch.nn.ReLU()] if i < len(ws) - 1 else [])
    model = torch.nn.Sequential(*layers)
    tx = torch.as_tensor(x, device="cuda").requires_grad_(True)
    tdy = torch.as_tensor(dy, device="cuda")
    wrt = [tx] + list(model.parameters())  # gradients returned, not accumulated into .grad

    def make(allow_tf32, net):
        def fwd():
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            with torch.no_grad():
                for _ in range(reps):
                    net(tx)
            torch.cuda.synchronize()

        def fb():
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            for _ in range(reps):
                torch.autograd.grad(net(tx), wrt, tdy)
            torch.cuda.synchronize()
        return fwd, fb

    modes = [("torch", False)] if dt == torch.float16 else [("torch_tf32", True), ("torch_strict", False)]
    for key, allow in modes:
        fns_f[key], fns_fb[key] = make(allow, model)
        if compile_too:
            # one compiled module per TF32 setting: the setting is read when it compiles
            torch.backends.cuda.matmul.allow_tf32 = allow
            compiled = torch.compile(model)
            fns_f[key + "_compile"], fns_fb[key + "_compile"] = make(allow, compiled)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20, help="launches per timed call")
    ap.add_argument("--tcnn", default=os.path.join(ROOT, "build", "libtcnn_mlp_shim.so"))
    ap.add_argument("--json", default=None, help="the JSON written (default: see above)")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libmetal_ops_cuda.so"))
    ap.add_argument("--dtypes", default="float16,float32,tf32")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch nn.Linear stack")
    ap.add_argument("--torch-compile", action="store_true", help="also the stack through torch.compile")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS))
    ap.add_argument("--base-lib", default=None,
                    help="another harness build, timed as 'base' in the same rounds (A/B of kernel versions)")
    args = ap.parse_args()

    import cupy
    lib = ctypes.CDLL(args.lib)
    lib.metal_ops_fused_mlp_workspace_bytes.restype = ctypes.c_int64
    base_lib = None
    if args.base_lib:
        base_lib = ctypes.CDLL(args.base_lib)
        base_lib.metal_ops_fused_mlp_workspace_bytes.restype = ctypes.c_int64
    tc = None
    if os.path.exists(args.tcnn):
        # the shim's driver-API symbols resolve against the already-present libcuda
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        tc = ctypes.CDLL(args.tcnn)
        tc.tcnn_mlp_create.restype = ctypes.c_void_p
        tc.tcnn_mlp_inference.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        tc.tcnn_mlp_forward_backward.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        tc.tcnn_mlp_padded_output_width.argtypes = [ctypes.c_void_p]
        tc.tcnn_mlp_destroy.argtypes = [ctypes.c_void_p]
    else:
        print(f"tiny-cuda-nn shim {args.tcnn} missing: no tiny-cuda-nn rows")
    torch = None
    if not args.no_torch:
        try:
            import torch
            print(f"PyTorch {torch.__version__}")
        except ImportError:
            print("PyTorch missing: no nn.Linear-stack rows")

    stream = cupy.cuda.get_current_stream()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    dev = props["name"].decode()
    rng = np.random.default_rng(0)
    n, reps = args.n, args.reps
    versions = {"cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
                "cuda_driver": cupy.cuda.runtime.driverGetVersion(), "cupy": cupy.__version__,
                "torch": getattr(torch, "__version__", None),
                "max_sm_clock_mhz": props.get("clockRate", 0) // 1000,
                "memory_clock_mhz": props.get("memoryClockRate", 0) // 1000}
    results = {"device": dev, "n": n, "rounds": args.rounds, "reps_per_call": reps, **versions, "rows": []}
    print(f"{dev}  N={n}  rounds={args.rounds} x {reps} launches; throughput in M points/s; {versions}")
    for name, in_dim, width, hidden, out_dim in CONFIGS:
        if name not in args.configs.split(","):
            continue
        for dname in args.dtypes.split(","):
            tf32 = dname in FUSED_MLP_TF32_IMPL
            dtype = np.float32 if tf32 else np.dtype(dname).type
            sfx = dname if tf32 else fused_mlp_suffix(dtype)
            ws, bs = fused_mlp_net(rng, in_dim, width, hidden, out_dim, dtype)
            x = cupy.asarray(rng.uniform(-1, 1, (n, in_dim)).astype(dtype))
            dw = [cupy.asarray(w) for w in ws]
            db = [cupy.asarray(b) for b in bs]
            y = cupy.empty((n, out_dim), dtype)
            saved = cupy.empty((hidden, n, width), dtype)
            dy = cupy.asarray(rng.standard_normal((n, out_dim)).astype(dtype))
            dx = cupy.empty_like(x)
            gw = [cupy.empty_like(w) for w in dw]
            gb = [cupy.empty_like(b) for b in db]
            wp, bp, gwp, gbp = pointer_array(dw), pointer_array(db), pointer_array(gw), pointer_array(gb)
            shape = (ctypes.c_int64(n), in_dim, width, hidden, out_dim, activation_code("relu"),
                     activation_code("none"), ctypes.c_float(0.0), stream_ptr(cupy))

            def timers(so):
                """(forward, forward + backward) timed calls of one harness build."""
                impl = FUSED_MLP_TF32_IMPL.get(dname, 0)
                wsb = fused_mlp_workspace(cupy, so, n, in_dim, width, hidden, out_dim, dtype, tf32, impl)
                fwd = fused_mlp_entry(so, "forward", dtype, tf32, impl)
                bwd = fused_mlp_entry(so, "backward", dtype, tf32, impl)

                def run_fwd():
                    for _ in range(reps):
                        check(fwd(dptr(x), wp, bp, dptr(y), None, *shape))
                    stream.synchronize()

                def run_fb():
                    for _ in range(reps):
                        check(fwd(dptr(x), wp, bp, dptr(y), dptr(saved), *shape))
                        check(bwd(dptr(dy), dptr(x), dptr(y), dptr(saved), wp, bp, dptr(dx), gwp, gbp,
                                  dptr(wsb), *shape))
                    stream.synchronize()

                return run_fwd, run_fb

            fns_f, fns_fb = {}, {}
            fns_f["ours"], fns_fb["ours"] = timers(lib)
            if base_lib is not None:
                fns_f["base"], fns_fb["base"] = timers(base_lib)
            if torch is not None:
                add_torch_stack(torch, fns_f, fns_fb, x, ws, bs, dy, reps, args.torch_compile)
            handle = None
            if tc is not None and dtype == np.float16:
                handle = tc.tcnn_mlp_create(in_dim, width, hidden, out_dim, 1, 0)
                pw = tc.tcnn_mlp_padded_output_width(handle)
                sp = ctypes.c_void_p(stream.ptr)
                for aos in (1, 0):
                    # aos: [n, width] buffers (tiny-cuda-nn's CM, our layout);
                    # soa: [width, n] buffers (its RM), the same values transposed.
                    if aos:
                        tx, ty, tdy = x, cupy.empty((n, pw), np.float16), cupy.zeros((n, pw), np.float16)
                        tdy[:, :out_dim] = dy
                    else:
                        tx, ty, tdy = cupy.ascontiguousarray(x.T), cupy.empty((pw, n), np.float16), cupy.zeros((pw, n), np.float16)
                        tdy[:out_dim, :] = dy.T
                    tdx = cupy.empty_like(tx)

                    def tcnn_fwd(tx=tx, ty=ty, aos=aos):
                        for _ in range(reps):
                            assert tc.tcnn_mlp_inference(handle, tx.data.ptr, ty.data.ptr, n, aos, sp) == 0
                        stream.synchronize()

                    def tcnn_fb(tx=tx, ty=ty, tdy=tdy, tdx=tdx, aos=aos):
                        for _ in range(reps):
                            assert tc.tcnn_mlp_forward_backward(handle, tx.data.ptr, ty.data.ptr, tdy.data.ptr,
                                                                tdx.data.ptr, n, aos, sp) == 0
                        stream.synchronize()

                    key = "tcnn_aos" if aos else "tcnn_soa"
                    fns_f[key], fns_fb[key] = tcnn_fwd, tcnn_fb
            for mode, fns in (("forward", fns_f), ("forward+backward", fns_fb)):
                tm = timing.interleaved_ms(fns, args.rounds, warmup=2)
                row = {"config": name, "dtype": sfx, "mode": mode,
                       "gflop_fwd": flops(n, in_dim, width, hidden, out_dim) / 1e9}
                line = f"{name:28s} {sfx:8s} {mode:17s}"
                for k, v in tm.items():
                    ms = timing.median_wall_ms(v) / reps
                    row[f"{k}_ms"] = ms
                    row[f"{k}_mpts_s"] = n / ms / 1e3
                    line += f"  {k}: {ms:7.3f} ms {n / ms / 1e3:9.1f} Mpt/s"
                for key in ("base", "tcnn_aos", "tcnn_soa", "torch", "torch_tf32", "torch_strict", "torch_compile",
                            "torch_tf32_compile", "torch_strict_compile"):
                    if key in tm:
                        r = timing.median_ratio(tm[key], tm["ours"])
                        row[f"speedup_vs_{key}"] = r
                        line += f"  ours/{key} x{r:.2f}"
                if "tcnn_aos" in tm:
                    # against tiny-cuda-nn's faster layout for this shape: its best case
                    row["speedup_vs_tcnn_best"] = min(row["speedup_vs_tcnn_aos"], row["speedup_vs_tcnn_soa"])
                    line += f"  vs best x{row['speedup_vs_tcnn_best']:.2f}"
                print(line, flush=True)
                results["rows"].append(row)
            if handle is not None:
                tc.tcnn_mlp_destroy(handle)
            del x, y, saved, dy, dx, gw, gb, fns_f, fns_fb  # the timers hold the workspaces
            cupy.get_default_memory_pool().free_all_blocks()
    if args.json or not args.base_lib:
        name = "fused_mlp_cuda_float32" if args.dtypes == "float32" else "fused_mlp_cuda"
        timing.write_json(args.json or timing.result_path(name, timing.device_label(dev)), results)


if __name__ == "__main__":
    main()
