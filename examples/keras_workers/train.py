"""A Keras model of the library's layers trained on several workers.

HashEncoding + FusedMLP fitted to a function of 3-D points with RobustLoss
and Adam (or SGD), under MultiWorkerMirroredStrategy where TF_CONFIG names this
process's worker (one process per machine or per GPU), else in one process.
Keras's `model.fit` fails under MultiWorkerMirroredStrategy
(keras-team/keras#20585), so this is the loop it would run: each call of
`train_steps` runs `--steps-per-call` steps, compiled by XLA as one program
where a GPU is listed (the gradients' all-reduce then an XLA collective over
NCCL inside it; XLA compiles collectives for GPUs only). Each worker reads its
own shard of the points, `--batch` a step: the global batch is the workers'
batches together, so the weights after a step are one process's after the
same step on that global batch.

    python -m examples.keras_workers.train                       # one process
    TF_CONFIG='{"cluster": {"worker": ["host-a:12345", "host-b:12345"]},
               "task": {"type": "worker", "index": 0}}' python -m examples.keras_workers.train
    # and the same with "index": 1 on host-b (examples/keras_workers/README.md)
"""
import argparse
import json
import os
import time

import numpy as np


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="training steps (a multiple of --steps-per-call)")
    p.add_argument("--steps-per-call", type=int, default=8, metavar="K", help="steps a call of the step function")
    p.add_argument("--batch", type=int, default=1 << 16, help="points a step on each worker")
    p.add_argument("--points", type=int, default=1 << 20, help="the data set's points, shared out over the workers")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0, help="the data and the initial weights")
    p.add_argument("--jit", choices=("auto", "on", "off"), default="auto",
                   help="compile each call with XLA (auto: where a GPU is listed)")
    p.add_argument("--save", metavar="PATH", help="the chief writes the trained weights there (.npz)")
    return p


def target(x):
    """The function the model learns: 3 outputs of a point in [0, 1)^3."""
    return np.stack([np.sin(6 * x[:, 0]), np.cos(5 * x[:, 1]), x[:, 2] ** 2], axis=1).astype(np.float32)


def build_model():
    import keras

    from metal_ops import layers

    return keras.Sequential([
        keras.Input((3,)),
        layers.HashEncoding(num_levels=8, features_per_level=2, log2_hashmap_size=14, base_resolution=8,
                            finest_resolution=256),
        layers.FusedMLP(3, hidden_units=64, hidden_layers=2),
    ])


def make_strategy():
    """MultiWorkerMirroredStrategy where TF_CONFIG is set (NCCL between GPUs, the ring between
    CPUs), else TensorFlow's default strategy."""
    import tensorflow as tf

    if not os.environ.get("TF_CONFIG"):
        return tf.distribute.get_strategy()
    impl = tf.distribute.experimental.CommunicationImplementation
    gpus = tf.config.list_physical_devices("GPU")  # listing devices runs no op
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if gpus else impl.RING))


def main(argv=None):
    args = build_parser().parse_args(argv)
    k = args.steps_per_call
    if k < 1 or args.steps < k or args.steps % k:
        raise SystemExit(f"--steps ({args.steps}) must be a positive multiple of --steps-per-call ({k})")
    if args.batch < 1 or not args.lr > 0:
        raise SystemExit(f"--batch ({args.batch}) and --lr ({args.lr}) must be positive")
    import tensorflow as tf

    import metal_ops  # noqa: F401  before the strategy: creating it runs TensorFlow's first op (docs/XLA.md)
    import keras

    from metal_ops import losses

    gpus = tf.config.list_physical_devices("GPU")
    if args.jit == "on" and os.environ.get("TF_CONFIG") and not gpus:
        raise SystemExit("--jit on: XLA compiles collectives for GPUs only, so CPU workers cannot all-reduce "
                         "in a compiled call; run them with --jit off (or auto)")
    strategy = make_strategy()
    replicas = strategy.num_replicas_in_sync
    if args.points < args.batch * k * replicas:
        raise SystemExit(f"--points ({args.points}) must hold a call's batches of all replicas "
                         f"(--batch x --steps-per-call x {replicas} replicas = {args.batch * k * replicas})")
    jit = args.jit == "on" or (args.jit == "auto" and bool(gpus))
    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = build_model()
        optimizer = (keras.optimizers.Adam if args.optimizer == "adam" else keras.optimizers.SGD)(args.lr)
        optimizer.build(model.trainable_variables)
    loss_fn = losses.RobustLoss(alpha=1.0, scale=0.1)  # under a strategy, divided by the replicas

    x = np.random.default_rng(args.seed).uniform(0, 1, (args.points, 3)).astype(np.float32)
    y = target(x)

    # The data set as batches of --batch points: tf.data's work is then per batch, not per point
    # (a point at a time, tf.data's work per point bounded the step). Worker w's i-th batch is
    # batch w + i * workers: together, one process's batch at --batch x workers.
    batches = args.points // args.batch
    xb = x[:batches * args.batch].reshape(batches, args.batch, -1)
    yb = y[:batches * args.batch].reshape(batches, args.batch, -1)

    def dataset(ctx):
        """This worker's shard, as [K, batch] blocks: one block a call."""
        ds = tf.data.Dataset.from_tensor_slices((xb, yb)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().batch(k, drop_remainder=True).prefetch(2)

    blocks = iter(strategy.distribute_datasets_from_function(dataset))

    def replica_step(xs, ys, i):
        with tf.GradientTape() as tape:
            loss = loss_fn(ys[i], model(xs[i], training=True))
        # apply_gradients sums the replicas' gradients (an all-reduce) before it updates
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function(jit_compile=jit or None)
    def train_steps(xs, ys):
        """K steps in one call; the global loss of the last one (summed over the replicas, each
        of which divides its mean by their number)."""
        for i in tf.range(k - 1) if k > 2 else range(k - 1):
            strategy.run(replica_step, args=(xs, ys, i))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(xs, ys, k - 1)),
                               axis=None)

    calls = args.steps // k
    loss = train_steps(*next(blocks))  # the first call traces (and compiles)
    first = float(loss)
    t0 = time.perf_counter()
    for _ in range(calls - 1):
        loss = train_steps(*next(blocks))
    loss = float(loss)
    seconds = time.perf_counter() - t0
    points = replicas * args.batch * k * (calls - 1)
    print(json.dumps({"replicas": replicas, "jit": jit,
                      "steps": args.steps, "first_loss": first, "loss": loss,
                      "points_per_second": points / seconds if seconds > 0 else None}))
    if args.save and (not os.environ.get("TF_CONFIG") or strategy.cluster_resolver.task_id == 0):
        np.savez(args.save, *[v.numpy() for v in model.trainable_variables])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
