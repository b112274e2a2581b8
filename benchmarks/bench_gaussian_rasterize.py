"""CPU benchmark of metal_ops.gaussian_rasterize against the dense TensorFlow
composite a user would write without it: every pixel against every Gaussian
as [pixels, N] matrices, the transmittances as cumulative products (the
per-pixel rule of docs/GAUSSIAN_RASTERIZE.md, stop at T <= 1e-4 included),
side by side in one process (checked equal first; benchmarks/against_tf.py).

So that both do the same work, every tile lists every Gaussian (sorted by
depth), as the dense composite sees them. Forward, and forward + backward
(the gradient w.r.t. means2d from a given upstream gradient of the image),
each in tf.function; the composite also under XLA. Rounds are interleaved
(benchmarks/timing.py); speedups are medians of per-round ratios.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_gaussian_rasterize [--rounds 30] [--out PATH]
prints the table, and with --out writes the rows as JSON.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import against_tf, timing  # noqa: E402
from tests.reference import gaussian_rasterize as ref  # noqa: E402


def tf_composite(means2d, conics, colors, opacities, background, width, height):
    """image [height, width, C] of Gaussians in the given order, every pixel against every one."""
    jj, ii = tf.meshgrid(tf.range(width, dtype=tf.float32), tf.range(height, dtype=tf.float32))
    px, py = tf.reshape(jj, [-1, 1]) + 0.5, tf.reshape(ii, [-1, 1]) + 0.5
    dx, dy = means2d[None, :, 0] - px, means2d[None, :, 1] - py
    sigma = 0.5 * (conics[None, :, 0] * dx * dx + conics[None, :, 2] * dy * dy) + conics[None, :, 1] * dx * dy
    alpha = tf.minimum(ref.ALPHA_MAX, opacities[None, :] * tf.exp(-sigma))
    used = (sigma >= 0) & (alpha >= ref.ALPHA_MIN)
    alpha = tf.where(used, alpha, 0.0)
    stops = used & (tf.math.cumprod(1 - alpha, axis=1) <= ref.TRANSMITTANCE_MIN)
    alpha = tf.where(used & (tf.cumsum(tf.cast(stops, tf.int32), axis=1) == 0), alpha, 0.0)
    weights = alpha * tf.math.cumprod(1 - alpha, axis=1, exclusive=True)
    t_final = tf.reduce_prod(1 - alpha, axis=1, keepdims=True)
    image = tf.matmul(weights, colors) + t_final * background[None, :]
    return tf.reshape(image, [height, width, -1])


def bench(n, width, height, rounds, results):
    rng = np.random.default_rng(0)
    inputs = ref.scene(rng, n, 3, width, height, scale=(2.0, 8.0))
    order = np.argsort(rng.uniform(size=n), kind="stable").astype(np.int32)  # the depth order
    inputs = [x[order] for x in inputs[:4]] + [inputs[4]]
    tiles_x, tiles_y = ref.tiles_of(width, height, 16)
    ids = np.tile(np.arange(n, dtype=np.int32), tiles_x * tiles_y)
    ranges = np.stack([np.arange(tiles_x * tiles_y) * n, np.arange(1, tiles_x * tiles_y + 1) * n], -1).astype(np.int32)
    rest = [tf.constant(x) for x in inputs[1:]]
    upstream = tf.constant(rng.uniform(-1, 1, (height, width, 3)).astype(np.float32))
    against_tf.bench(f"gaussian_rasterize N={n} {width}x{height} C=3",
                     lambda m: metal_ops.gaussian_rasterize(m, *rest, ids, ranges, width=width, height=height)[0],
                     lambda m: tf_composite(m, *rest, width, height), tf.constant(inputs[0]), upstream, rounds,
                     {"n": n, "width": width, "height": height}, results, items=(width * height, "pixels"),
                     rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for config in [(256, 128, 128), (1024, 64, 64)]:
        bench(*config, args.rounds, rows)
    if args.out:
        timing.write_json(args.out, {"tensorflow": tf.__version__, "results": rows})
