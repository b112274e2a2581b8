"""MetalOpsFusedConv2D on a CUDA GPU vs what TensorFlow makes of the same block.

    python -m benchmarks.bench_fused_conv2d_gpu [--rounds 15] [--iters 20] [--no-tf32] [--quick]

The block of a ResNet basic block's second half, float32 NHWC on /GPU:0:
y = act(conv2d(x, w, SAME) + b + r). "tf" is TensorFlow's own graph of it,
tf.nn.conv2d + tf.nn.bias_add + add + activation in a tf.function (what its
GPU remapper and cuDNN do with that); "ours" is metal_ops.fused_conv2d(x, w,
bias=b, residual=r, activation=act) in a tf.function. Timed: the forward pass,
and a training step's work (the forward pass and the gradients with respect to
x, w, b and r). Outputs are checked against each other first.

Each round runs every variant `--iters` times back to back, then waits for the
GPU (one element of the last output fetched); rounds interleave the variants
(benchmarks/timing.py) and the speedup is the median of the per-round ratios
tf / ours (> 1: ours is faster). Both sides use TF32 tensor cores exactly when
TensorFlow allows them (tf.config.experimental.enable_tensor_float_32_execution;
--no-tf32 turns them off for both).

Shapes: batch 32 at 56x56x64, 28x28x128, 14x14x256, 7x7x512, 3x3 and 1x1
filters (C -> C), relu; the other activations at 28x28x128 3x3. --quick: one
small shape on whatever device TensorFlow has (the CPU here), 3 rounds, no JSON.

JSON: benchmarks/results/fused_conv2d_gpu.<gpu>.json (<gpu>: h100, ...).
"""
import os

import numpy as np

from benchmarks import timing

SHAPES = [(56, 64), (28, 128), (14, 256), (7, 512)]
BATCH = 32
OTHER_ACTS = ["relu6", "elu", "leaky_relu", "sigmoid", "tanh", "swish"]
ALPHA = 0.2


# This benchmark's sections of docs/PERFORMANCE.md, read by benchmarks/report.py:
# {<benchmark>.<device>: (title, what it measures, [(column header, row key), ...] or None)}.
REPORT = {
    "fused_conv2d_gpu.h100": ("FusedConv2D on a GPU through TensorFlow",
                              "The op against TensorFlow's own Conv2D + BiasAdd + AddV2 + activation in "
                              "`tf.function`, float32 with TF32 on.",
                              [("input NHWC", "shape"), ("filter", "filter"), ("activation", "activation"),
                               ("forward x", "forward_speedup"), ("train x", "train_speedup"),
                               ("train ours ms", "train_ours_ms")]),
}


def configs(quick):
    """(batch, size, channels, filter size, activation) of each row."""
    if quick:
        return [(2, 14, 16, 3, "relu")]
    rows = [(BATCH, hw, c, k, "relu") for hw, c in SHAPES for k in (3, 1)]
    return rows + [(BATCH, 28, 128, 3, act) for act in OTHER_ACTS]


def tf_activation(tf, act):
    return {"relu": tf.nn.relu, "relu6": tf.nn.relu6, "elu": tf.nn.elu,
            "leaky_relu": lambda z: tf.nn.leaky_relu(z, alpha=ALPHA), "sigmoid": tf.nn.sigmoid,
            "tanh": tf.nn.tanh, "swish": tf.nn.silu}[act]


def bench(tf, metal_ops, device, batch, hw, c, k, act, rounds, iters, results):
    rng = np.random.default_rng(0)
    with tf.device(device):
        x = tf.constant(rng.standard_normal((batch, hw, hw, c)).astype(np.float32))
        w = tf.constant((rng.standard_normal((k, k, c, c)) / np.sqrt(k * k * c)).astype(np.float32))
        b = tf.constant(rng.standard_normal(c).astype(np.float32))
        r = tf.constant(rng.standard_normal((batch, hw, hw, c)).astype(np.float32))
    f = tf_activation(tf, act)

    def tf_block(x, w, b, r):
        return f(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b) + r)

    def our_block(x, w, b, r):
        return metal_ops.fused_conv2d(x, w, bias=b, residual=r, activation=act, leaky_relu_alpha=ALPHA)

    def train(block):
        def step(x, w, b, r):
            with tf.GradientTape() as tape:
                tape.watch([x, w, b, r])
                y = block(x, w, b, r)
                loss = tf.reduce_sum(y * y)
            return [y] + tape.gradient(loss, [x, w, b, r])
        return step

    args = (x, w, b, r)
    row = {"batch": batch, "height": hw, "width": hw, "channels": c, "filter": f"{k}x{k}", "activation": act}
    for mode, wrap in (("forward", lambda blk: blk), ("train", train)):
        fns = {"tf": tf.function(wrap(tf_block)), "ours": tf.function(wrap(our_block))}
        with tf.device(device):
            outs = {name: fn(*args) for name, fn in fns.items()}
        y_tf, y_ours = (outs[n] if mode == "forward" else outs[n][0] for n in ("tf", "ours"))
        assert device.strip("/").split(":")[0] in y_ours.device.upper(), (
            f"metal_ops.fused_conv2d ran on {y_ours.device}, not {device}: no kernel for that device loaded")
        tol = 2e-2 if tf.config.experimental.tensor_float_32_execution_enabled() else 1e-3
        np.testing.assert_allclose(y_ours.numpy(), y_tf.numpy(), atol=tol, rtol=tol)

        def timed(fn):
            def run():
                with tf.device(device):
                    for _ in range(iters):
                        out = fn(*args)
                    y = out if mode == "forward" else out[0]
                    y[0, 0, 0, 0].numpy()  # waits for the stream
            return run

        times = timing.interleaved_ms({name: timed(fn) for name, fn in fns.items()}, rounds, warmup=2)
        row[f"{mode}_tf_ms"] = timing.median_wall_ms(times["tf"]) / iters
        row[f"{mode}_ours_ms"] = timing.median_wall_ms(times["ours"]) / iters
        row[f"{mode}_speedup"] = timing.median_ratio(times["tf"], times["ours"])
    print(f"{batch}x{hw}x{hw}x{c:<4} {k}x{k} {act:<10}"
          f" forward tf {row['forward_tf_ms']:8.3f} ms  ours {row['forward_ours_ms']:8.3f} ms"
          f"  x{row['forward_speedup']:5.2f} | train tf {row['train_tf_ms']:8.3f} ms"
          f"  ours {row['train_ours_ms']:8.3f} ms  x{row['train_speedup']:5.2f}", flush=True)
    results.append(row)


def main():
    args = timing.gpu_arguments("fused_conv2d_gpu", 15, "one small shape", "calls per variant and round").parse_args()
    import tensorflow as tf

    import metal_ops

    device, header = timing.tf_gpu_setup(tf, metal_ops, "bench_fused_conv2d_gpu", args)
    results = []
    for config in configs(args.quick):
        bench(tf, metal_ops, device, *config, header["rounds"], header["iters"], results)
    if not args.quick:
        path = args.json or timing.result_path("fused_conv2d_gpu", timing.device_label(header["device"]))
        timing.write_json(path, {**header, "rows": results})


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
