"""FusedMLP on a CUDA GPU through TensorFlow vs the Keras Dense stack a user
writes instead, side by side in one process.

    python -m benchmarks.bench_fused_mlp_gpu [--rounds 7] [--iters 20] [--n 1048576] [--no-tf32] [--quick]

Networks: benchmarks/fused_mlp_networks.py's four (ReLU hidden layers,
linear output), float32 [N, in] inputs on /GPU:0. Contenders, each called in a
tf.function:
  "keras": a keras.Sequential of Dense layers (its own weights, set to ours);
  "keras_xla": the same model under tf.function(jit_compile=True), the
    fastest way TensorFlow offers to run it;
  "ours": metal_ops.layers.FusedMLP holding the same weights.
Timed: inference (the forward pass) and a training step's work (forward and
the gradients of sum(y * dy) for x and every weight and bias). Outputs and
gradients are checked against each other first. Both sides use TF32 tensor
cores exactly when TensorFlow allows them (on by default; --no-tf32 turns
them off for both, and FusedMLP then runs its exact float32 path).

Rounds interleave the contenders (benchmarks/timing.py); a round runs each
`--iters` times back to back and waits for the GPU; speedups are medians of
per-round ratios (> 1: ours is faster). --quick: one small network on
whatever device TensorFlow has (the CPU here), 3 rounds, no JSON.
JSON: benchmarks/results/fused_mlp_gpu[_strict].<gpu>.json (<gpu>: h100, ...).
"""
import os

import numpy as np

from benchmarks import timing
from benchmarks.fused_mlp_networks import CONFIGS


COLUMNS = [("network", "config"), ("train ours ms", "train_ours_ms"), ("train Keras ms", "train_keras_ms"),
           ("train XLA ms", "train_keras_xla_ms"), ("x Keras", "train_speedup_vs_keras"),
           ("x XLA", "train_speedup_vs_keras_xla"), ("forward ours ms", "forward_ours_ms"),
           ("forward x XLA", "forward_speedup_vs_keras_xla")]

# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "fused_mlp_gpu.h100": ("FusedMLP on a GPU through TensorFlow against Keras Dense",
                           "The layer against the same Keras Dense stack in `tf.function` and under XLA, float32 "
                           "with TF32 allowed (TensorFlow's default), N = 2^20 rows; train = forward, gradients and "
                           "SGD update.", COLUMNS),
    "fused_mlp_gpu_strict.h100": ("FusedMLP on a GPU through TensorFlow, TF32 off",
                                  "The same with `--no-tf32`: strict float32 on both sides.", COLUMNS),
}


def contenders(tf, metal_ops, device, config, n):
    """x [n, in] on `device`, and the three contenders' tf.functions per mode,
    with the Keras stack in strict float32 as the reference:
    {"forward" | "train": {"keras" | "keras_xla" | "ours" | "strict": fn(x)}}."""
    name, in_dim, width, hidden, out_dim = config
    rng = np.random.default_rng(0)
    keras = tf.keras
    ours = metal_ops.layers.FusedMLP(hidden_units=width, hidden_layers=hidden, units=out_dim,
                                     activation="relu", output_activation=None)
    dense = keras.Sequential([keras.layers.Dense(width, activation="relu") for _ in range(hidden)] +
                             [keras.layers.Dense(out_dim)])
    with tf.device(device):
        x = tf.constant(rng.uniform(-1, 1, (n, in_dim)).astype(np.float32))
        dy = tf.constant(rng.standard_normal((n, out_dim)).astype(np.float32))
        ours(x[:2])
        dense(x[:2])
        weights = [rng.uniform(-0.1, 0.1, w.shape).astype(np.float32) for w in dense.get_weights()]
        dense.set_weights(weights)
        ours.set_weights(weights)

    def infer(model):
        return lambda x: model(x)

    def train(model):
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = model(x)
                loss = tf.reduce_sum(y * dy)
            return [y] + tape.gradient(loss, [x] + model.trainable_variables)
        return step

    return x, {mode: {"keras": tf.function(wrap(dense)), "keras_xla": tf.function(wrap(dense), jit_compile=True),
                      "ours": tf.function(wrap(ours)), "strict": strict_float32(tf, wrap(dense))}
               for mode, wrap in (("forward", infer), ("train", train))}


def strict_float32(tf, fn):
    """fn run with TF32 off (then restored): the float32 reference."""
    def run(x):
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            return fn(x)
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(tf32)
    return run


def relative_errors(got, want):
    """||g - w|| / ||w|| per output."""
    got, want = (got, want) if isinstance(want, list) else ([got], [want])
    return [float(np.linalg.norm(np.asarray(g, np.float64) - np.asarray(w, np.float64)) /
                  max(np.linalg.norm(np.asarray(w, np.float64)), 1e-30)) for g, w in zip(got, want)]


def check_outputs(tf, name, mode, outs, strict):
    """Ours against Keras: relative norms of the differences, since over many
    rows a few ReLU units sit within rounding of 0 and flip between two
    implementations, so elementwise tolerances do not hold (the kernels'
    elementwise bounds are tests/cuda/test_fused_mlp_cuda.py's). With TF32 off,
    within 1e-4 of both Keras runs. With TF32 on, no further from the strict
    float32 result than twice the further of Keras's two TF32 runs (and 1e-4)."""
    if not tf.config.experimental.tensor_float_32_execution_enabled():
        for key in ("keras", "keras_xla"):
            for i, err in enumerate(relative_errors(outs["ours"], outs[key])):
                assert err <= 1e-4, f"{name} {mode} output {i}: ours vs {key} relative error {err:.2e} > 1e-4"
        return
    ref = strict()
    ours = relative_errors(outs["ours"], ref)
    keras = [max(a, b) for a, b in zip(relative_errors(outs["keras"], ref), relative_errors(outs["keras_xla"], ref))]
    for i, (err, bound) in enumerate(zip(ours, keras)):
        assert err <= max(2 * bound, 1e-4), (
            f"{name} {mode} output {i}: ours is {err:.2e} from strict float32, Keras's TF32 runs at most {bound:.2e}")


def bench(tf, metal_ops, device, config, n, rounds, iters, results):
    name = config[0]
    x, modes = contenders(tf, metal_ops, device, config, n)
    row = {"config": name, "n": n}
    line = f"{name:26s}"
    for mode, fns in modes.items():
        strict = fns.pop("strict")
        with tf.device(device):
            outs = {key: fn(x) for key, fn in fns.items()}
        first = {key: (out if mode == "forward" else out[0]) for key, out in outs.items()}
        assert device.strip("/").split(":")[0] in first["ours"].device.upper(), (
            f"FusedMLP ran on {first['ours'].device}, not {device}: no kernel for that device loaded")
        with tf.device(device):
            check_outputs(tf, name, mode, outs, lambda: strict(x))

        def timed(fn):
            def run():
                with tf.device(device):
                    for _ in range(iters):
                        out = fn(x)
                    y = out if mode == "forward" else out[0]
                    y[0, 0].numpy()  # waits for the stream
            return run

        times = timing.interleaved_ms({key: timed(fn) for key, fn in fns.items()}, rounds, warmup=2)
        for key in fns:
            row[f"{mode}_{key}_ms"] = timing.median_wall_ms(times[key]) / iters
        for key in ("keras", "keras_xla"):
            row[f"{mode}_speedup_vs_{key}"] = timing.median_ratio(times[key], times["ours"])
        line += (f" | {mode} ours {row[f'{mode}_ours_ms']:7.3f} keras {row[f'{mode}_keras_ms']:7.3f}"
                 f" xla {row[f'{mode}_keras_xla_ms']:7.3f} ms  x{row[f'{mode}_speedup_vs_keras']:.2f}"
                 f" / x{row[f'{mode}_speedup_vs_keras_xla']:.2f}")
    print(line, flush=True)
    results.append(row)


def main():
    parser = timing.gpu_arguments("fused_mlp_gpu", 7, "one small network", "calls per contender and round")
    parser.add_argument("--n", type=int, default=1 << 20, help="rows per call")
    args = parser.parse_args()
    import tensorflow as tf

    import metal_ops
    import metal_ops.layers  # noqa: F401

    device, header = timing.tf_gpu_setup(tf, metal_ops, "bench_fused_mlp_gpu", args,
                                         n=4096 if args.quick else args.n)
    results = []
    for config in CONFIGS[1:2] if args.quick else CONFIGS:
        bench(tf, metal_ops, device, config, header["n"], header["rounds"], header["iters"], results)
    if not args.quick:
        name = "fused_mlp_gpu_strict" if args.no_tf32 else "fused_mlp_gpu"
        timing.write_json(args.json or timing.result_path(name, timing.device_label(header["device"])),
                          {**header, "rows": results})


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
