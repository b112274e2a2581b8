"""A Keras train step of FusedMLP layers under XLA against the same model of
Keras Dense layers under XLA, on a CUDA GPU through TensorFlow, in one process
(docs/XLA.md).

    python -m benchmarks.bench_xla_gpu [--rounds 9] [--iters 20] [--n 262144] [--results benchmarks/results] [--no-tf32] [--quick]

Models (the shapes of bench_fused_mlp_gpu's networks, ReLU hidden layers,
linear output, the same weights): keras.Sequential of Dense layers and one
metal_ops.layers.FusedMLP. Each is compiled with an Adam optimizer and a mean
squared error, and its `train_on_batch` (Keras's own train step) is timed:
  "dense_xla": Dense layers, `jit_compile=True` (what Keras runs on a GPU);
  "fused_xla": FusedMLP, `jit_compile=True` (the op's XLA kernels);
  "fused": FusedMLP, `jit_compile=False` (TensorFlow's graph executor).
The first call of each (tracing and XLA's compilation) is timed on its own.
Rounds interleave the contenders (benchmarks/timing.py); a round runs each
`--iters` steps and waits for the GPU; speedups are medians of per-round
ratios (> 1: the FusedMLP model is faster). --quick: one small network on
whatever device TensorFlow has (the CPU here), 3 rounds, no JSON.
JSON: <results>/xla_keras_train_step.<device>.json.
"""
import os
import re
import time

import numpy as np

from benchmarks import timing
from benchmarks.fused_mlp_networks import CONFIGS


# This benchmark's section of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "xla_keras_train_step.h100": (
        "A Keras train step under XLA: FusedMLP layers against Dense layers",
        "`train_on_batch` of the same network as `keras.Sequential` of Dense layers and as one "
        "`layers.FusedMLP`, Adam and MSE, N = 2^18 rows, float32 (TF32 allowed, TensorFlow's default); "
        "`jit_compile=True` for both (the FusedMLP model through the XLA kernels' CUDA handlers), and the "
        "FusedMLP model without XLA; x = the median of per-round ratios (above 1: FusedMLP under XLA is faster); "
        "first = the first call (tracing and compiling), s.",
        [("network", "config"), ("Dense+XLA ms", "dense_xla_ms"), ("FusedMLP+XLA ms", "fused_xla_ms"),
         ("FusedMLP ms", "fused_ms"), ("x Dense+XLA", "speedup_fused_xla_vs_dense_xla"),
         ("x no XLA", "speedup_fused_xla_vs_fused"), ("first Dense+XLA s", "dense_xla_first_step_s"),
         ("first FusedMLP+XLA s", "fused_xla_first_step_s")]),
}


def device_slug(tf):
    """A short name of the GPU for file names ("h100", "h200"), or "cpu"."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu"
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu")
    found = re.search(r"\b([A-Z]\d{2,4}[A-Za-z]?)\b", name)
    return (found.group(1) if found else re.sub(r"[^a-z0-9]+", "_", name.lower())).lower()


def models(tf, metal_ops, config, n, device):
    """x, y and the contenders' compiled Keras models, the same weights."""
    keras = tf.keras
    name, in_dim, width, hidden, out_dim = config
    rng = np.random.default_rng(0)
    with tf.device(device):
        x = tf.constant(rng.uniform(-1, 1, (n, in_dim)).astype(np.float32))
        y = tf.constant(rng.standard_normal((n, out_dim)).astype(np.float32))
    weights = None
    built = {}
    for key, jit in (("dense_xla", True), ("fused_xla", True), ("fused", False)):
        if key.startswith("dense"):
            model = keras.Sequential([keras.Input((in_dim,))] +
                                     [keras.layers.Dense(width, activation="relu") for _ in range(hidden)] +
                                     [keras.layers.Dense(out_dim)])
        else:
            model = keras.Sequential([keras.Input((in_dim,)),
                                      metal_ops.layers.FusedMLP(out_dim, hidden_units=width, hidden_layers=hidden,
                                                                activation="relu")])
        if weights is None:
            weights = [rng.uniform(-0.1, 0.1, w.shape).astype(np.float32) for w in model.get_weights()]
        model.set_weights(weights)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", jit_compile=jit)
        assert model.jit_compile is jit, f"{key}: Keras resolved jit_compile to {model.jit_compile}"
        built[key] = model
    return x, y, built


def bench(tf, metal_ops, device, config, n, rounds, iters):
    x, y, contenders = models(tf, metal_ops, config, n, device)
    row = {"config": config[0], "n": n}
    for key, model in contenders.items():
        with tf.device(device):
            t0 = time.perf_counter()
            loss = model.train_on_batch(x, y)
            row[f"{key}_first_step_s"] = time.perf_counter() - t0
        assert np.isfinite(loss), f"{key}: loss {loss}"

    def timed(model):
        def run():
            with tf.device(device):
                for _ in range(iters):
                    loss = model.train_on_batch(x, y, return_dict=False)
                float(loss)  # waits for the GPU
        return run

    times = timing.interleaved_ms({key: timed(m) for key, m in contenders.items()}, rounds, warmup=2)
    for key in contenders:
        row[f"{key}_ms"] = timing.median_wall_ms(times[key]) / iters
    row["speedup_fused_xla_vs_dense_xla"] = timing.median_ratio(times["dense_xla"], times["fused_xla"])
    row["speedup_fused_xla_vs_fused"] = timing.median_ratio(times["fused"], times["fused_xla"])
    print(f"{config[0]:26s} dense+XLA {row['dense_xla_ms']:7.3f} ms  FusedMLP+XLA {row['fused_xla_ms']:7.3f} ms"
          f"  FusedMLP {row['fused_ms']:7.3f} ms  x{row['speedup_fused_xla_vs_dense_xla']:.2f} vs dense+XLA"
          f"  x{row['speedup_fused_xla_vs_fused']:.2f} vs no XLA", flush=True)
    return row


def main():
    parser = timing.gpu_arguments("xla_keras_train_step", 9, "one small network", "train steps per contender and round")
    parser.add_argument("--n", type=int, default=1 << 18, help="rows per batch")
    parser.add_argument("--results", default=os.path.join("benchmarks", "results"),
                        help="the folder of the JSON when --json is not given")
    args = parser.parse_args()
    import tensorflow as tf

    import metal_ops  # before the first XLA compilation (docs/XLA.md)
    import metal_ops.layers  # noqa: F401

    device, header = timing.tf_gpu_setup(tf, metal_ops, "bench_xla_gpu", args, n=4096 if args.quick else args.n)
    rows = [bench(tf, metal_ops, device, config, header["n"], header["rounds"], header["iters"])
            for config in (CONFIGS[1:2] if args.quick else CONFIGS)]
    if not args.quick:
        path = args.json or os.path.join(args.results, f"xla_keras_train_step.{device_slug(tf)}.json")
        timing.write_json(path, {**header, "rows": rows})


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
