"""CPU benchmark of metal_ops.gaussian_tile_bin against the binning written
as TensorFlow ops (tf_tile_bin below: every intersection enumerated with
tf.repeat, then two stable tf.argsort passes, depth then tile), side by side
in one process (checked equal first), interleaved rounds
(benchmarks/timing.py ours_vs_composite).

The Gaussians of an 800 x 600 scene (metal_ops.gaussian_project.scene)
projected by metal_ops.gaussian_project, 16-pixel tiles, N = 100,000 and
300,000. JSON in benchmarks/results/gaussian_tile_bin.cpu.json.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_gaussian_tile_bin [--rounds 20]
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import timing  # noqa: E402
from metal_ops.gaussian_project import scene  # noqa: E402

WIDTH, HEIGHT, TILE = 800, 600, 16
TILES_X, TILES_Y = -(-WIDTH // TILE), -(-HEIGHT // TILE)


@tf.function
def tf_tile_bin(means2d, radii, depths):
    rx, ry = tf.cast(radii[:, 0], tf.float32), tf.cast(radii[:, 1], tf.float32)
    x0 = tf.cast(tf.clip_by_value(tf.floor((means2d[:, 0] - rx) / TILE), 0, TILES_X), tf.int32)
    x1 = tf.cast(tf.clip_by_value(tf.math.ceil((means2d[:, 0] + rx) / TILE), 0, TILES_X), tf.int32)
    y0 = tf.cast(tf.clip_by_value(tf.floor((means2d[:, 1] - ry) / TILE), 0, TILES_Y), tf.int32)
    y1 = tf.cast(tf.clip_by_value(tf.math.ceil((means2d[:, 1] + ry) / TILE), 0, TILES_Y), tf.int32)
    kept = tf.reduce_all(radii > 0, axis=-1)
    wide = tf.where(kept, x1 - x0, 0)
    count = wide * tf.where(kept, y1 - y0, 0)
    gaussian = tf.repeat(tf.range(tf.shape(radii)[0]), count)
    first = tf.repeat(tf.cumsum(count, exclusive=True), count)
    local = tf.range(tf.shape(gaussian)[0]) - first
    w = tf.gather(tf.maximum(wide, 1), gaussian)
    tile = (tf.gather(y0, gaussian) + local // w) * TILES_X + tf.gather(x0, gaussian) + local % w
    by_depth = tf.argsort(tf.gather(depths, gaussian), stable=True)
    order = tf.gather(by_depth, tf.argsort(tf.gather(tile, by_depth), stable=True))
    tiles = tf.gather(tile, order)
    edges = tf.searchsorted(tiles, tf.range(TILES_X * TILES_Y + 1), side="left")
    return tf.gather(gaussian, order), tf.stack([edges[:-1], edges[1:]], 1)


def bench(n, rounds, results):
    inputs = scene(np.random.default_rng(0), n, WIDTH, HEIGHT)
    p = metal_ops.gaussian_project(*inputs, width=WIDTH, height=HEIGHT)
    args = (p.means2d, p.radii, p.depths)

    def ours(*v):
        return metal_ops.gaussian_tile_bin(*v, width=WIDTH, height=HEIGHT, tile_size=TILE)

    for a, b in zip(ours(*args), tf_tile_bin(*args)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    row = {"n": n, "m": int(ours(*args).gaussian_ids.shape[0]), "rounds": rounds}
    row.update(timing.ours_vs_composite(ours, tf_tile_bin, args, rounds))
    results.append(row)
    print(f"gaussian_tile_bin N={n} M={row['m']}: ours {row['ours_ms']:.2f} ms | TF {row['composite_ms']:.2f} ms "
          f"-> {row['speedup']:.2f}x (load {row['load_average']:.1f})")


if __name__ == "__main__":
    timing.run_configs("gaussian_tile_bin", [(100_000,), (300_000,)], bench, rounds=20)
