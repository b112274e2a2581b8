"""CPU benchmark of metal_ops.gaussian_project against the projection written
as TensorFlow ops (tf_projection below: the same formulas, gsplat's classic
3DGS, batched over the Gaussians), side by side in one process (checked equal
first; benchmarks/against_tf.py).

N = 100,000 and 300,000 Gaussians of a scene in front of an 800 x 600 camera
(metal_ops.gaussian_project.scene), float32: forward, and forward + backward
(gradients of means, quats and scales from a given upstream gradient of
means2d, conics and depths), each in tf.function; the composite also under
XLA (jit_compile=True). The parameters travel as one [N, 10] tensor (means,
quats, scales) and the differentiable outputs as one [N, 6] (means2d,
conics, depths). Rounds are interleaved (benchmarks/timing.py); speedups are
medians of per-round ratios. JSON in benchmarks/results/gaussian_project.cpu.json.

Usage (from the repository root; on a shared machine, under the CPU-benchmark lock):
  .venv/bin/python -m benchmarks.bench_gaussian_project [--rounds 60]
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import metal_ops  # noqa: E402
from benchmarks import against_tf  # noqa: E402
from metal_ops.gaussian_project import scene  # noqa: E402

WIDTH, HEIGHT = 800, 600


def tf_projection(params, viewmat, k):
    """The projection as TF ops: [N, 10] (means, quats, scales) -> [N, 6]
    (means2d, conics, depths), culled Gaussians zero."""
    means, quats, scales = params[:, :3], params[:, 3:7], params[:, 7:]
    w, x, y, z = tf.unstack(quats / tf.norm(quats, axis=1, keepdims=True), axis=1)
    rot = tf.reshape(tf.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                               2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                               2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], 1), [-1, 3, 3])
    a = tf.einsum("ij,njk->nik", viewmat[:3, :3], rot * scales[:, None, :])
    t = means @ tf.transpose(viewmat[:3, :3]) + viewmat[:3, 3]
    fx, fy, cx, cy = k[0, 0], k[1, 1], k[0, 2], k[1, 2]
    tz = t[:, 2]
    lim_x, lim_y = 0.3 * 0.5 * WIDTH / fx, 0.3 * 0.5 * HEIGHT / fy
    tx = tz * tf.clip_by_value(t[:, 0] / tz, -(cx / fx + lim_x), (WIDTH - cx) / fx + lim_x)
    ty = tz * tf.clip_by_value(t[:, 1] / tz, -(cy / fy + lim_y), (HEIGHT - cy) / fy + lim_y)
    zero = tf.zeros_like(tz)
    j = tf.reshape(tf.stack([fx / tz, zero, -fx * tx / tz ** 2, zero, fy / tz, -fy * ty / tz ** 2], 1), [-1, 2, 3])
    ja = j @ a
    cov = ja @ tf.transpose(ja, [0, 2, 1])
    ca, cb, cc = cov[:, 0, 0] + 0.3, cov[:, 0, 1], cov[:, 1, 1] + 0.3
    det = ca * cc - cb * cb
    u, v = fx * t[:, 0] / tz + cx, fy * t[:, 1] / tz + cy
    h = 0.5 * (ca + cc)
    r = tf.math.ceil(3 * tf.sqrt(h + tf.sqrt(tf.maximum(0.01, h * h - det))))
    keep = ((tz >= 0.01) & (tz <= 1e10) & (det > 0) & (u + r > 0) & (u - r < WIDTH) & (v + r > 0) &
            (v - r < HEIGHT))
    out = tf.stack([u, v, cc / det, -cb / det, ca / det, tz], 1)
    return tf.where(keep[:, None], out, tf.zeros_like(out))


def bench(n, rounds, results):
    rng = np.random.default_rng(0)
    means, quats, scales, viewmat, k = scene(rng, n, WIDTH, HEIGHT)
    params = tf.constant(np.concatenate([means, quats, scales], 1))
    viewmat, k = tf.constant(viewmat), tf.constant(k)
    upstream = tf.constant(rng.normal(size=(n, 6)).astype(np.float32))

    def ours(p):
        out = metal_ops.gaussian_project(p[:, :3], p[:, 3:7], p[:, 7:], viewmat, k, width=WIDTH, height=HEIGHT)
        return tf.concat([out.means2d, out.conics, out.depths[:, None]], 1)

    against_tf.bench(f"gaussian_project N={n} {WIDTH}x{HEIGHT}", ours, lambda p: tf_projection(p, viewmat, k),
                     params, upstream, rounds, {"n": n}, results, items=(n, "gaussians"), rtol=2e-3, atol=2e-3)


if __name__ == "__main__":
    against_tf.main("gaussian_project", [(100_000,), (300_000,)], bench)
