"""3D Gaussian splatting: Gaussians and a camera to an image in one call, and
the Gaussians' parameters held for training.

- rasterize_gaussians: project (metal_ops.gaussian_project), bin and sort by
  tile and depth (metal_ops.gaussian_tile_bin, or with a budget of
  intersections metal_ops.gaussian_tile_bin_static, which XLA compiles), composite front to back
  (metal_ops.gaussian_rasterize); differentiable with respect to the
  Gaussians' means, rotations, scales, opacities and colours.
- sh_colors: view-dependent colours from spherical-harmonics coefficients
  (metal_ops.sh_encode's basis, the reference's +0.5 offset and clamp at 0).
- Gaussians: the parameters of a set of Gaussians as variables whose first
  dimension changes (densification clones, splits and prunes them), stored
  as the reference stores them: log scales, unnormalised quaternions,
  opacity logits, SH coefficients (DC and the rest apart).
- GaussianAdam: Adam with a learning rate per parameter (a number or a
  keras.optimizers.schedules.LearningRateSchedule of the step) whose moments
  follow the Gaussians when they are cloned, split or pruned.

docs/SPLAT.md describes the pipeline and its conventions (OpenCV cameras:
x right, y down, +z forward; pixel (row i, column j) centred at (j + 0.5, i + 0.5)).
"""
import math

import numpy as np
import tensorflow as tf

from metal_ops._args import integer
from metal_ops.gaussian_project import gaussian_project
from metal_ops.gaussian_tile_bin import gaussian_tile_bin, gaussian_tile_bin_static
from metal_ops.gaussian_rasterize import gaussian_rasterize
from metal_ops.sh_encode import sh_encode

__all__ = ["GaussianAdam", "Gaussians", "PARAMETERS", "rasterize_gaussians", "sh_colors"]

# The stored parameters, in the order Gaussians.variables lists them.
PARAMETERS = ("means", "scales", "quats", "opacities", "sh0", "shN")
# The colours' offset (the reference's SH2RGB: colour = SH + 0.5).
SH_OFFSET = 0.5
SH_C0 = 0.28209479177387814


def rasterize_gaussians(means, quats, scales, opacities, colors, viewmat, K, width, height, background=None,
                        near_plane=0.01, far_plane=1e10, eps2d=0.3, tile_size=16, max_intersections=None,
                        name=None):
    """Renders Gaussians seen by a pinhole camera.

    Args:
      means: [N, 3] float32 centres (world space).
      quats: [N, 4] rotations (w, x, y, z), normalised by the op.
      scales: [N, 3] standard deviations along the rotated axes, > 0.
      opacities: [N] in [0, 1].
      colors: [N, C] colours (C >= 1).
      viewmat: [4, 4] world-to-camera (OpenCV: x right, y down, +z forward).
      K: [3, 3] intrinsics (fx, fy, cx, cy in pixels).
      width, height: the image size in pixels.
      background: [C] colour behind the Gaussians (default 0).
      near_plane, far_plane: Gaussians whose centre's depth is outside are culled.
      eps2d: the low-pass filter added to each 2D covariance's diagonal (pixels^2).
      tile_size: the side of a tile in pixels.
      max_intersections: None (the default) bins every (tile, Gaussian)
        intersection, M of them, a size that depends on the data; an int B >= 1
        bins into outputs of B entries (gaussian_tile_bin_static), which
        `tf.function(jit_compile=True)` compiles: Gaussians are kept whole, in
        index order, while their intersections fit in B, and the ones after
        the first that does not fit are left out of the image (every tile
        alike).

    Returns (image [H, W, C], alpha [H, W], info): info holds the projection
    (means2d [N, 2], conics [N, 3], depths [N], radii [N, 2] int32: the
    opacity-aware box's half-sides (x, y), 0 where culled) and the binning (gaussian_ids [M], tile_ranges [tiles, 2]); with
    max_intersections, gaussian_ids is [B] (-1 past the kept entries) and info
    also holds num_intersections and num_gaussians (int32 scalars: the
    intersections and Gaussians kept) and overflow (a bool scalar: the budget
    left Gaussians out, num_gaussians < N).
    `tape.gradient(loss, info["means2d"])` is the view-space positional
    gradient that densification reads.
    """
    owner = "rasterize_gaussians"
    with tf.name_scope(name or owner):
        width = integer(owner, "width", width, 1)
        height = integer(owner, "height", height, 1)
        if max_intersections is not None:
            max_intersections = integer(owner, "max_intersections", max_intersections, 1)
        colors = tf.convert_to_tensor(colors, tf.float32)
        means2d, conics, depths, radii = gaussian_project(
            means, quats, scales, viewmat, K, width=width, height=height, near_plane=near_plane,
            far_plane=far_plane, eps2d=eps2d, opacities=opacities)
        binned = (tf.stop_gradient(means2d), radii, tf.stop_gradient(depths))
        if max_intersections is None:
            bins = gaussian_tile_bin(*binned, width=width, height=height, tile_size=tile_size)._asdict()
        else:
            bins = gaussian_tile_bin_static(*binned, width=width, height=height, tile_size=tile_size,
                                            max_intersections=max_intersections)._asdict()
            bins["overflow"] = bins["num_gaussians"] < tf.shape(radii, out_type=tf.int32)[0]
        if background is None:
            background = tf.zeros(tf.shape(colors)[-1:], tf.float32)
        image, alpha = gaussian_rasterize(means2d, conics, colors, opacities, background, bins["gaussian_ids"],
                                          bins["tile_ranges"], width=width, height=height, tile_size=tile_size)[:2]
        info = dict(means2d=means2d, conics=conics, depths=depths, radii=radii, **bins)
        return image, alpha, info


def sh_colors(sh, means, camera_position, degree):
    """Colours [N, 3] from SH coefficients [N, K, 3] (K = 16: bands 0 to 3)
    seen from camera_position [3]: the bands below `degree` + 1 count
    (degree 0: the DC term alone); colour = sum_k Y_k(dir) sh_k + 0.5,
    clamped at 0 as the reference does."""
    sh = tf.convert_to_tensor(sh, tf.float32)
    return _sh_colors(sh[:, :1, :], sh[:, 1:, :], means, camera_position, degree)


def _sh_colors(sh0, shN, means, camera_position, degree):
    """sh_colors of the DC term sh0 [N, 1, 3] and the higher bands shN [N, K - 1, 3]
    kept apart (as Gaussians stores them: no concatenation, nor its gradient's split)."""
    degree = int(degree)
    if not 0 <= degree <= 3:
        raise ValueError(f"sh_colors: degree must be in [0, 3], got {degree}")
    rgb = SH_C0 * sh0[:, 0, :]
    if degree > 0:
        used = (degree + 1) ** 2
        dirs = means - tf.cast(camera_position, tf.float32)
        dirs = dirs / tf.maximum(tf.norm(dirs, axis=-1, keepdims=True), 1e-12)
        basis = sh_encode(dirs, degree=degree + 1)  # [N, used]; basis[:, 0] is SH_C0
        # A product and a sum over the bands (an einsum here is N tiny matrix products).
        rgb += tf.reduce_sum(basis[:, 1:, None] * shN[:, :used - 1, :], axis=1)
    return tf.maximum(rgb + SH_OFFSET, 0.0)


def _logit(p):
    return math.log(p / (1.0 - p))


class Gaussians(tf.Module):
    """A set of Gaussians' parameters as resizable variables (first dimension None).

    means [N, 3]; scales [N, 3] (log); quats [N, 4] (w, x, y, z); opacities
    [N] (logits); sh0 [N, 1, 3] and shN [N, 15, 3] (SH bands 0 and 1 to 3).
    `activated()` gives what rasterize_gaussians takes; `render` draws them.
    """

    def __init__(self, means, scales, quats, opacities, sh0, shN, name=None):
        super().__init__(name=name)
        values = dict(means=means, scales=scales, quats=quats, opacities=opacities, sh0=sh0, shN=shN)
        n = np.shape(means)[0]
        for key, shape in (("means", (3,)), ("scales", (3,)), ("quats", (4,)), ("opacities", ()),
                           ("sh0", (1, 3)), ("shN", (15, 3))):
            v = np.asarray(values[key], np.float32)
            if v.shape != (n,) + shape:
                raise ValueError(f"Gaussians: {key} must have shape {(n,) + shape}, got {v.shape}")
            if not np.all(np.isfinite(v)):
                raise ValueError(f"Gaussians: {key} holds NaN or infinite values")
            setattr(self, key, tf.Variable(v, shape=tf.TensorShape((None,) + shape), name=key))

    @classmethod
    def from_points(cls, points, colors, opacity=0.1, seed=0):
        """Gaussians at points [N, 3] with colours [N, 3] in [0, 1]: isotropic,
        each as wide as the mean distance to its three nearest neighbours,
        unrotated, opacity 0.1, colour in the DC term (the reference's start)."""
        points = np.asarray(points, np.float64)
        n = points.shape[0]
        dist = nearest_neighbor_distance(points, 3)
        scales = np.log(np.maximum(dist, 1e-7))[:, None].repeat(3, axis=1)
        quats = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
        sh0 = ((np.asarray(colors, np.float64) - SH_OFFSET) / SH_C0)[:, None, :]
        return cls(points, scales, quats, np.full(n, _logit(opacity)), sh0, np.zeros((n, 15, 3)))

    @classmethod
    def random_in_box(cls, box, count, seed=0, opacity=0.1):
        """`count` Gaussians uniform in box [2, 3] with random colours (NeRF-synthetic's start)."""
        rng = np.random.default_rng(seed)
        box = np.asarray(box, np.float64)
        points = box[0] + rng.random((count, 3)) * (box[1] - box[0])
        return cls.from_points(points, rng.random((count, 3)), opacity=opacity)

    @property
    def count(self):
        return int(tf.shape(self.means)[0])

    @property
    def variables_by_name(self):
        return {k: getattr(self, k) for k in PARAMETERS}

    def activated(self, sh_degree):
        """(means, quats, scales, opacities, sh [N, K, 3]) as rasterize_gaussians and sh_colors take them."""
        sh = tf.concat([self.sh0, self.shN], axis=1)
        return self.means, self.quats, tf.exp(self.scales), tf.sigmoid(self.opacities), sh

    def render(self, viewmat, K, width, height, sh_degree=3, background=None, max_intersections=None):
        """rasterize_gaussians of these Gaussians with colours from their SH seen from the camera
        (max_intersections: rasterize_gaussians' budget, None for none)."""
        means, quats, scales, opacities = self.means, self.quats, tf.exp(self.scales), tf.sigmoid(self.opacities)
        viewmat = tf.convert_to_tensor(viewmat, tf.float32)
        rotation, translation = viewmat[:3, :3], viewmat[:3, 3]
        camera_position = -tf.linalg.matvec(rotation, translation, transpose_a=True)
        colors = _sh_colors(self.sh0, self.shN, means, camera_position, sh_degree)
        return rasterize_gaussians(means, quats, scales, opacities, colors, viewmat, K, width, height,
                                   background=background, max_intersections=max_intersections)


def nearest_neighbor_distance(points, k=3):
    """Mean distance of each point [N, 3] to its k nearest others. Exact: the
    candidates are the points of the 27 grid cells around a point's cell; a
    point whose k-th candidate lies farther than a cell's side (so a nearer
    point could lie outside them) is compared with every point."""
    points = np.asarray(points, np.float64)
    n = points.shape[0]
    k = min(k, n - 1)
    if k <= 0:
        return np.ones(n)
    lo = points.min(0)
    volume = float(np.prod(np.maximum(points.max(0) - lo, 1e-9)))
    cell = 2.0 * (volume / n) ** (1.0 / 3.0)
    keys = np.floor((points - lo) / cell).astype(np.int64)
    dims = keys.max(0) + 1
    flat = (keys[:, 0] * dims[1] + keys[:, 1]) * dims[2] + keys[:, 2]
    order = np.argsort(flat, kind="stable")
    sorted_flat = flat[order]
    offsets = np.stack(np.meshgrid(*[np.arange(-1, 2)] * 3, indexing="ij"), -1).reshape(-1, 3)
    out = np.full(n, np.nan)
    for start in range(0, n, 8192):
        idx = np.arange(start, min(start + 8192, n))
        found = []
        for off in offsets:
            nk = keys[idx] + off
            inside = np.all((nk >= 0) & (nk < dims), axis=1)
            f = (nk[:, 0] * dims[1] + nk[:, 1]) * dims[2] + nk[:, 2]
            first = np.searchsorted(sorted_flat, f, "left")
            count = np.where(inside, np.searchsorted(sorted_flat, f, "right") - first, 0)
            for j in range(int(count.max())):
                has = j < count
                member = np.where(has, order[np.minimum(first + j, n - 1)], idx)
                d = np.linalg.norm(points[member] - points[idx], axis=1)
                found.append(np.where(has & (member != idx), d, np.inf))
        d = np.sort(np.stack(found, 1), axis=1)[:, :k] if found else np.full((idx.size, k), np.inf)
        exact = d[:, k - 1] <= cell
        out[idx[exact]] = d[exact].mean(1)
    for i in np.flatnonzero(np.isnan(out)):
        d = np.linalg.norm(points - points[i], axis=1)
        d[i] = np.inf
        out[i] = np.partition(d, k - 1)[:k].mean()
    return out


class GaussianAdam:
    """Adam over a Gaussians' parameters with a learning rate per parameter.

    learning_rates: {parameter name: float or LearningRateSchedule (of the
    step, counted from 0)}; parameters not named are not trained. The moments
    are kept per Gaussian, so `keep`, `append` and `reset` change them with
    the Gaussians (new Gaussians start with zero moments, as in the
    reference's densification).
    """

    def __init__(self, gaussians, learning_rates, beta_1=0.9, beta_2=0.999, epsilon=1e-15):
        unknown = sorted(set(learning_rates) - set(PARAMETERS))
        if unknown:
            raise ValueError(f"GaussianAdam: unknown parameters {unknown}; expected some of {list(PARAMETERS)}")
        self.gaussians = gaussians
        self.learning_rates = dict(learning_rates)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.m, self.v = {}, {}
        for key in self.learning_rates:
            var = getattr(gaussians, key)
            shape = tf.TensorShape((None,)).concatenate(var.shape[1:])
            self.m[key] = tf.Variable(tf.zeros_like(var), shape=shape, trainable=False, name=f"m_{key}")
            self.v[key] = tf.Variable(tf.zeros_like(var), shape=shape, trainable=False, name=f"v_{key}")

    @property
    def names(self):
        return tuple(k for k in PARAMETERS if k in self.learning_rates)

    def learning_rate(self, key, step=None):
        lr = self.learning_rates[key]
        step = tf.cast(self.iterations if step is None else step, tf.float32)
        return tf.cast(lr(step), tf.float32) if callable(lr) else tf.constant(lr, tf.float32)

    def apply(self, grads):
        """One Adam step: grads {name: gradient} (None: no gradient this step).

        Each parameter's update is one fused kernel (TensorFlow's
        ResourceApplyAdam). Its epsilon is added to sqrt(v) before the bias
        correction, so it is given epsilon sqrt(1 - beta_2^t): the step is the
        reference's lr m_hat / (sqrt(v_hat) + epsilon)."""
        t = tf.cast(self.iterations + 1, tf.float32)
        beta_1_power, beta_2_power = tf.pow(self.beta_1, t), tf.pow(self.beta_2, t)
        epsilon = self.epsilon * tf.sqrt(1.0 - beta_2_power)
        for key in self.names:
            g = grads.get(key)
            if g is None:
                continue
            tf.raw_ops.ResourceApplyAdam(
                var=getattr(self.gaussians, key).handle, m=self.m[key].handle, v=self.v[key].handle,
                beta1_power=beta_1_power, beta2_power=beta_2_power, lr=self.learning_rate(key),
                beta1=tf.constant(self.beta_1, tf.float32), beta2=tf.constant(self.beta_2, tf.float32),
                epsilon=epsilon, grad=tf.convert_to_tensor(g, tf.float32))
        self.iterations.assign_add(1)

    def _each(self):
        for key in PARAMETERS:
            yield key, getattr(self.gaussians, key), self.m.get(key), self.v.get(key)

    def keep(self, mask):
        """Keeps the Gaussians where mask [N] is true (pruning), with their moments."""
        mask = tf.convert_to_tensor(mask, tf.bool)
        for _, var, m, v in self._each():
            for x in (var, m, v):
                if x is not None:
                    x.assign(tf.boolean_mask(x, mask))

    def append(self, values):
        """Adds Gaussians: values {name: [M, ...]} for every parameter; their moments start at zero."""
        for key, var, m, v in self._each():
            new = tf.convert_to_tensor(values[key], tf.float32)
            var.assign(tf.concat([var, new], 0))
            for x in (m, v):
                if x is not None:
                    x.assign(tf.concat([x, tf.zeros_like(new)], 0))

    def reset(self, key, value):
        """Sets parameter `key` to value and zeroes its moments (the opacity reset)."""
        getattr(self.gaussians, key).assign(value)
        if key in self.m:
            self.m[key].assign(tf.zeros_like(self.m[key]))
            self.v[key].assign(tf.zeros_like(self.v[key]))
