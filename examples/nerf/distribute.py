"""tf.distribute for the sample: the --strategy's strategy, its all-reduce's transport, and where
the model's ops run."""


def resolve_collective(collective):
    """--collective auto: NCCL where TensorFlow lists a GPU, else the ring."""
    import tensorflow as tf

    if collective != "auto":
        return collective
    return "nccl" if tf.config.list_physical_devices("GPU") else "ring"


def communication_options(collective="auto", bytes_per_pack=0):
    """MultiWorkerMirroredStrategy's all-reduce: NCCL between GPUs (TensorFlow's AUTO takes the
    ring, which goes through host memory and gRPC), the ring over gRPC between CPUs; gradients in
    packs of about `bytes_per_pack` bytes (0: one pack)."""
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=bytes_per_pack,
        implementation=impl.NCCL if resolve_collective(collective) == "nccl" else impl.RING)


def make_strategy(name, collective="auto", bytes_per_pack=0):
    """The --strategy's tf.distribute strategy (None: the default one). The op library loads
    first: XLA takes op kernels in at TensorFlow's first op, which creating a strategy runs."""
    import metal_ops  # noqa: F401
    import tensorflow as tf

    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=communication_options(collective, bytes_per_pack))
    return None


def runs_on_gpu(strategy):
    """Whether the model's ops run on GPUs: the strategy's devices, or (the
    default strategy) where an op created here is placed, device scopes included."""
    import tensorflow as tf

    if strategy is not tf.distribute.get_strategy() or tf.distribute.has_strategy():
        return all("GPU" in d.upper() for d in strategy.extended.worker_devices)
    return "GPU" in tf.identity(tf.constant(0.0)).device.upper()
