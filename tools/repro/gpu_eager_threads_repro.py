"""Shows a TensorFlow (not metal_ops) failure on GPUs: shape arithmetic on GPU
tensors from 8 eager threads at once now and then fails.

    python tools/repro/gpu_eager_threads_repro.py [ITERATIONS]

Each of 8 threads repeatedly builds weights of its tensor's shape with
tf.reshape(f(tf.range(tf.size(x))), tf.shape(x)) on /GPU:0, first with plain
TensorFlow tensors, then with metal_ops.volume_render's outputs. The counts of
errors ("Input to reshape is a tensor with N values, but the requested shape
has M") are printed per variant; tests/test_concurrency.py builds its weights
on the host for this reason (docs/RELIABILITY.md).
"""
import collections
import sys
import threading

import numpy as np
import tensorflow as tf

THREADS = 8


def weights_float_range(o):
    return tf.reshape(tf.cast(tf.sin(tf.range(tf.size(o), dtype=tf.float32) * 0.37), o.dtype), tf.shape(o))


def weights_int_range(o):
    return tf.reshape(tf.sin(tf.cast(tf.range(tf.size(o)), tf.float32) * 0.37), tf.shape(o))


def random_tensors(seed):
    return [tf.random.uniform([512, 48]), tf.random.uniform([512]), tf.random.uniform([512, 3])]


def volume_render_outputs(seed):
    import metal_ops

    rng = np.random.default_rng(seed)
    sigma = tf.constant(rng.uniform(0, 3, (512, 48)), tf.float32)
    color = tf.constant(rng.uniform(0, 1, (512, 48, 3)), tf.float32)
    t = tf.constant(2 + np.cumsum(rng.uniform(0, 0.1, (512, 49)), axis=1), tf.float32)
    return list(metal_ops.volume_render(sigma, color, t, background=tf.ones([3]), return_weights=True))


def run(label, make, fn, iterations):
    errors = collections.Counter()
    barrier = threading.Barrier(THREADS)

    def worker(seed):
        with tf.device("/GPU:0"):
            tensors = make(seed)
            barrier.wait()
            for _ in range(iterations):
                for x in tensors:
                    try:
                        fn(x)
                    except tf.errors.InvalidArgumentError as e:
                        errors[e.message.split("}}")[-1].strip()[:90]] += 1

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = THREADS * iterations * len(make(0))
    print(f"{label}: {sum(errors.values())} errors in {calls} calls", dict(errors.most_common(2)), flush=True)


def main():
    if not tf.config.list_logical_devices("GPU"):
        sys.exit("gpu_eager_threads_repro: TensorFlow lists no GPU")
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    run("TensorFlow tensors, float range", random_tensors, weights_float_range, iterations)
    run("TensorFlow tensors, int32 range", random_tensors, weights_int_range, iterations)
    run("volume_render outputs, float range", volume_render_outputs, weights_float_range, iterations)


if __name__ == "__main__":
    main()
