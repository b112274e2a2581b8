"""One step of one contender of benchmarks/bench_fused_mlp_gpu.py, kernel by
kernel, for Nsight Compute: where FusedMLP's step and the Keras (+XLA) one
spend their GPU time (docs/FUSED_MLP_GPU.md, "Through TensorFlow").

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --log-file ours.csv \\
        python -m benchmarks.profile_fused_mlp_tf_step --contender ours [--config w64_in64_h4_out64]
        [--mode train] [--no-tf32]
    python -m benchmarks.profile_fused_mlp_tf_step --summarize ours.csv keras_xla.csv

The networks, weights, inputs and loss are the benchmark's. After warm-up
calls, one call runs between cudaProfilerStart and cudaProfilerStop (the CUDA
runtime TensorFlow loaded), so Nsight Compute sees only that call's kernels.
--summarize prints each file's kernels, the slowest first, and their total.
"""
import argparse
import csv
import ctypes
import os
import sys

from benchmarks.bench_fused_mlp_gpu import CONFIGS, contenders

UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def profile(args):
    import tensorflow as tf

    import metal_ops
    import metal_ops.layers  # noqa: F401

    if args.no_tf32:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    if not tf.config.list_physical_devices("GPU"):
        sys.exit("profile_fused_mlp_tf_step: TensorFlow lists no GPU")
    config = next((c for c in CONFIGS if c[0] == args.config), None)
    if config is None:
        sys.exit(f"--config must be one of {', '.join(c[0] for c in CONFIGS)}, got {args.config!r}")
    device = "/GPU:0"
    x, modes = contenders(tf, metal_ops, device, config, args.n)
    fn = modes[args.mode][args.contender]

    def call():
        with tf.device(device):
            out = fn(x)
            (out if args.mode == "forward" else out[0])[0, 0].numpy()  # waits for the stream

    for _ in range(args.warmup):
        call()
    cudart = ctypes.CDLL("libcudart.so.12")  # the one TensorFlow's CUDA build loaded
    if cudart.cudaProfilerStart() != 0:
        sys.exit("cudaProfilerStart failed")
    call()
    cudart.cudaProfilerStop()
    print(f"profiled one {args.mode} call of {args.contender} ({args.config}, N = {args.n}, "
          f"TF32 {'on' if tf.config.experimental.tensor_float_32_execution_enabled() else 'off'})")


def summarize(paths, top):
    for path in paths:
        kernels = {}
        with open(path, newline="") as f:
            lines = [line for line in f if line.startswith('"')]  # ncu's own messages are not CSV rows
        for row in csv.DictReader(lines):
            if row.get("Metric Name") != "gpu__time_duration.sum":
                continue
            us = float(row["Metric Value"].replace(",", "")) * UNITS_US[row["Metric Unit"]]
            name = row["Kernel Name"]
            count, total = kernels.get(name, (0, 0.0))
            kernels[name] = (count + 1, total + us)
        total = sum(t for _, t in kernels.values())
        print(f"== {os.path.basename(path)}: {sum(c for c, _ in kernels.values())} kernels, {total:.1f} us")
        for name, (count, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"  {us:9.1f} us {100 * us / max(total, 1e-9):5.1f}%  x{count:<3d} {name[:110]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contender", choices=("ours", "keras", "keras_xla"), default="ours")
    parser.add_argument("--config", default=CONFIGS[0][0])
    parser.add_argument("--mode", choices=("forward", "train"), default="train")
    parser.add_argument("--n", type=int, default=1 << 20, help="rows per call")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-tf32", action="store_true", help="strict float32 on both sides")
    parser.add_argument("--summarize", nargs="+", metavar="CSV", help="ncu --csv logs to summarize")
    parser.add_argument("--top", type=int, default=15, help="kernels listed per file")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize, args.top)
    else:
        profile(args)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
