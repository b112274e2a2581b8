"""The hash-grid NeRF: metal_ops.layers.HashEncoding + tiny MLPs + metal_ops.volume_render.

Field: positions (normalised to the scene AABB, [0,1]^3) -> multiresolution
hash encoding (L levels x F features) -> density MLP (one hidden layer of 64)
-> 16 outputs: log-density (through a truncated exponential) and 15 geometry
features; the colour MLP (two hidden layers of 64) takes those features and
the view direction encoded with real spherical harmonics of degree 4 (16
values), so glossy highlights can move with the view.
"""
import math

import keras
import tensorflow as tf

import metal_ops
from examples.nerf import sampling


@tf.custom_gradient
def trunc_exp(x):
    """exp(x) with the gradient's exponent clamped at 15 (instant-NGP's density activation)."""
    y = tf.exp(tf.minimum(x, 30.0))

    def grad(dy):
        return dy * tf.exp(tf.clip_by_value(x, -30.0, 15.0))

    return y, grad


def sh_encode(d, degree=4):
    """Real spherical harmonics of unit directions [N, 3]: degree**2 values (bands 0..degree-1, degree <= 4)."""
    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    xx, yy, zz = x * x, y * y, z * z
    return tf.stack([
        tf.fill(tf.shape(x), 0.28209479177387814),
        -0.48860251190291987 * y,
        0.48860251190291987 * z,
        -0.48860251190291987 * x,
        1.0925484305920792 * x * y,
        -1.0925484305920792 * y * z,
        0.94617469575755997 * zz - 0.31539156525251999,
        -1.0925484305920792 * x * z,
        0.54627421529603959 * (xx - yy),
        0.59004358992664352 * y * (-3.0 * xx + yy),
        2.8906114426405538 * x * y * z,
        0.45704579946446572 * y * (1.0 - 5.0 * zz),
        0.3731763325901154 * z * (5.0 * zz - 3.0),
        0.45704579946446572 * x * (1.0 - 5.0 * zz),
        1.4453057213202769 * z * (xx - yy),
        0.59004358992664352 * x * (-xx + 3.0 * yy),
    ][:degree * degree], axis=-1)


MLPS = ("fused", "dense")
MLP_PRECISIONS = ("float32", "float16")


class HashNeRF(keras.Model):
    """Hash-grid radiance field. call(points01 [N,3], dirs [N,3]) -> (sigma [N], rgb [N,3]).

    mlp="fused" (the default) evaluates each MLP as one metal_ops.layers.FusedMLP
    op and the directions with metal_ops.sh_encode; mlp="dense" builds the same
    networks from keras.layers.Dense and the TF sh_encode above (for comparison:
    same weights layout, same initialisers, same outputs).
    """

    def __init__(self, num_levels=16, features_per_level=2, log2_hashmap_size=16,
                 base_resolution=16, finest_resolution=1024, hidden=64, geo_features=15, sh_degree=4,
                 mlp="fused", mlp_precision="float32", **kw):
        super().__init__(**kw)
        if not 1 <= sh_degree <= 4:
            raise ValueError(f"HashNeRF: sh_degree must be 1..4, got {sh_degree}")
        if mlp not in MLPS:
            raise ValueError(f"HashNeRF: mlp must be one of {MLPS}, got {mlp!r}")
        if mlp_precision not in MLP_PRECISIONS:
            raise ValueError(f"HashNeRF: mlp_precision must be one of {MLP_PRECISIONS}, got {mlp_precision!r}")
        if mlp_precision == "float16" and mlp != "fused":
            raise ValueError("HashNeRF: mlp_precision='float16' needs mlp='fused'")
        self.mlp_precision = mlp_precision
        self.sh_degree = int(sh_degree)
        self.mlp = mlp
        self.encoding = metal_ops.layers.HashEncoding(
            num_levels=num_levels, features_per_level=features_per_level,
            log2_hashmap_size=log2_hashmap_size, base_resolution=base_resolution,
            finest_resolution=finest_resolution, name="hash_encoding")
        n_in = num_levels * features_per_level
        n_color_in = geo_features + sh_degree * sh_degree
        # Build eagerly so that variables exist (checkpoints, distribution strategies).
        self.encoding.build((None, 3))
        if mlp == "fused":
            # float16: float32 weights, the op in float16 with float32 accumulation on a GPU.
            policy = "mixed_float16" if mlp_precision == "float16" else None
            self.density_mlp = metal_ops.layers.FusedMLP(
                1 + geo_features, hidden_units=hidden, hidden_layers=1, activation="relu", name="density_mlp",
                dtype=policy)
            self.color_mlp = metal_ops.layers.FusedMLP(
                3, hidden_units=hidden, hidden_layers=2, activation="relu", output_activation="sigmoid",
                name="color_mlp", dtype=policy)
            self.density_mlp.build((None, n_in))
            self.color_mlp.build((None, n_color_in))
            self._sh_encode = metal_ops.sh_encode
        else:
            self.density_hidden = keras.layers.Dense(hidden, activation="relu", name="density_hidden")
            self.density_out = keras.layers.Dense(1 + geo_features, name="density_out")
            self.color_hidden1 = keras.layers.Dense(hidden, activation="relu", name="color_hidden1")
            self.color_hidden2 = keras.layers.Dense(hidden, activation="relu", name="color_hidden2")
            self.color_out = keras.layers.Dense(3, activation="sigmoid", name="color_out")
            self.density_hidden.build((None, n_in))
            self.density_out.build((None, hidden))
            self.color_hidden1.build((None, n_color_in))
            self.color_hidden2.build((None, hidden))
            self.color_out.build((None, hidden))
            self._sh_encode = sh_encode

    def _density_net(self, h):
        if self.mlp == "fused":
            return tf.cast(self.density_mlp(h), tf.float32)
        return self.density_out(self.density_hidden(h))

    def _color_net(self, h):
        if self.mlp == "fused":
            return tf.cast(self.color_mlp(h), tf.float32)
        return self.color_out(self.color_hidden2(self.color_hidden1(h)))

    def density(self, points01):
        # One split, not two slices: its gradient is one concat, where each slice's is a
        # StridedSliceGrad that writes the whole [N, 16] (about a tenth of a CPU step).
        log_sigma, geo = tf.split(self._density_net(self.encoding(points01)), [1, -1], axis=1)
        return trunc_exp(tf.reshape(log_sigma, [-1]) - 1.0), geo

    def call(self, points01, dirs):
        sigma, geo = self.density(points01)
        h = tf.concat([geo, self._sh_encode(dirs, self.sh_degree)], axis=-1)
        return sigma, self._color_net(h)


def checkpoint_mlp(path):
    """Which MLP layout ("fused" or "dense") the checkpoint at `path` holds, or None (no hash model)."""
    names = {name for name, _ in tf.train.list_variables(path)}
    if any(n.startswith("model/density_mlp/kernel_0/") for n in names):
        return "fused"
    if any(n.startswith("model/density_hidden/") for n in names):
        return "dense"
    return None


def normalize_points(points, aabb):
    return tf.clip_by_value((points - aabb[0]) / (aabb[1] - aabb[0]), 0.0, 1.0)


def render_hash(model, origins, dirs, *, aabb, near, far, background, num_samples,
                grid=None, use_grid=False, num_candidates=128, occlusion_depth=0.0, jitter=True,
                early_termination=1e-4, return_weights=False):
    """Renders rays with the hash field. Returns (VolumeRender result, t [R,S+1])."""
    t_near, t_far = sampling.ray_aabb(origins, dirs, aabb, near, far)
    if use_grid:
        t, ts, scale = sampling.occupancy_sample(origins, dirs, t_near, t_far, grid, num_samples,
                                                 num_candidates=num_candidates, jitter=jitter,
                                                 max_optical_depth=occlusion_depth)
    else:
        t, ts, scale = sampling.stratified(t_near, t_far, num_samples, jitter=jitter)
    r = tf.shape(origins)[0]
    pts = origins[:, None, :] + dirs[:, None, :] * ts[..., None]
    x01 = normalize_points(tf.reshape(pts, (-1, 3)), aabb)
    d = tf.reshape(tf.broadcast_to(dirs[:, None, :], tf.shape(pts)), (-1, 3))
    sigma, rgb = model(x01, d)
    sigma = tf.reshape(sigma, (r, num_samples)) * scale
    rgb = tf.reshape(rgb, (r, num_samples, 3))
    out = metal_ops.volume_render(sigma, rgb, t, background=background,
                                  early_termination=early_termination,
                                  return_weights=return_weights)
    return out, t


def march_step_size(aabb, march_steps):
    """The ray-marching step: `march_steps` steps along the AABB's diagonal."""
    lo, hi = tf.unstack(tf.convert_to_tensor(aabb, tf.float32))
    return float(tf.norm(hi - lo)) / float(march_steps)


def render_hash_marched(model, origins, dirs, *, aabb, near, far, background, grid, use_grid, step_size,
                        max_samples, jitter=True, seed=0, early_termination=1e-4, return_weights=False,
                        prune=True, occupancy=None, sample_budget=None, march_budget=None):
    """Renders rays with the hash field on packed samples (metal_ops.ray_march + packed_volume_render).

    Only the steps in occupied cells of `grid` are evaluated (all steps inside
    the AABB while `use_grid` is False), a ray's count varying with what it
    crosses. With `prune`, a density-only pass without gradients first drops
    the samples behind each ray's early termination (transmittance below
    `early_termination`, which the renderer skips anyway): the colour network,
    the gradients and the rendering see only the samples that can contribute.
    `aabb` is a concrete [2, 3] array (it becomes the op's attribute).
    `occupancy`: the bitfield ray_march takes, where the caller keeps one
    (default: packed here from grid.mask, or all occupied without `use_grid`).
    `sample_budget`: static shapes (what XLA compiles): the field and the
    renderer take exactly that many samples, the rays that do not fit get
    none (the samples' `num_rays` says how many did) and the rest of the
    budget is padding. metal_ops.ray_march_static marches into `march_budget`
    samples (default `sample_budget`); with `prune`, the density pass runs on
    those and the samples it keeps are compacted into `sample_budget`
    (_before_termination_static).
    Returns (PackedVolumeRender result, RayMarchSamples (RayMarchStaticSamples with `sample_budget`) of the
    rendered samples, marched sample count).
    """
    r = tf.shape(origins)[0]
    if occupancy is None:
        occupancy = metal_ops.pack_occupancy((grid.mask if use_grid else tf.ones_like(grid.mask))[None])
    march_args = (origins, dirs, tf.fill([r], float(near)), tf.fill([r], float(far)), occupancy, aabb,
                  grid.resolution, step_size)
    if sample_budget is not None:
        pruned = prune and early_termination > 0
        samples = metal_ops.ray_march_static(
            *march_args, sample_budget=(march_budget or sample_budget) if pruned else sample_budget,
            max_samples=max_samples, jitter=jitter, seed=seed)
        marched = samples.num_samples
    else:
        samples = metal_ops.ray_march(*march_args, max_samples=max_samples, jitter=jitter, seed=seed)
        marched = tf.shape(samples.t_starts)[0]

    def points(s):
        t_mid = 0.5 * (s.t_starts + s.t_ends)
        return normalize_points(tf.gather(origins, s.ray_indices) + tf.gather(dirs, s.ray_indices) * t_mid[:, None],
                                aabb)

    if prune and early_termination > 0:
        sigma0 = tf.stop_gradient(model.density(points(samples))[0])
        if sample_budget is None:
            samples = _before_termination(samples, sigma0, early_termination, r)
        else:
            samples = _before_termination_static(samples, sigma0, early_termination, r, sample_budget)
    sigma, rgb = model(points(samples), tf.gather(dirs, samples.ray_indices))
    # validate=False: the layout is the march's own, so the renderer reads nothing back and the
    # host does not wait for it (a NaN density then shows in the loss, which fit() checks).
    out = metal_ops.packed_volume_render(
        sigma, rgb, samples.t_starts, samples.t_ends, samples.ray_offsets, samples.ray_counts,
        background=background, early_termination=early_termination, return_weights=return_weights,
        num_samples=None if sample_budget is None else samples.num_samples, validate=False)
    return out, samples, marched


def _transmittance_above(samples, sigma, threshold):
    """Whether each sample's transmittance (before it) is at least `threshold`: a prefix of each ray's.

    Exact in float32, with no float64 and no cancellation between rays: each optical depth
    tau = sigma * dt is clamped at L + 1 (L = -ln(threshold): one sample that deep ends its ray
    alone, so the clamp changes no answer) and rounded down to a multiple of a power-of-two
    quantum small enough that the deepest ray's sum stays within 2^24 quanta. The cumulative sum
    restarts at each ray (its first sample carries minus the rays before it), so every partial
    sum any scan forms is a multiple of the quantum within 2^24 of them: exact in any order
    (sampling.blocked_cumsum's, which a GPU runs faster than tf.math.cumsum's in TensorFlow's
    executor; sampling.prefix_sum's where the length is static, as in the --jit step). The
    rounding down keeps every sample the renderer's own early termination uses, and at most a
    quantum per sample more.
    """
    limit = -math.log(threshold)
    tau = tf.minimum(sigma * (samples.t_ends - samples.t_starts), limit + 1.0)
    rays = tf.shape(samples.ray_counts)[0]
    deepest = (limit + 1.0) * tf.cast(tf.maximum(tf.reduce_max(samples.ray_counts), 1), tf.float32)
    # (one bit spare: the logarithm's rounding cannot take the sum past 2^24 quanta)
    quantum = tf.math.pow(2.0, tf.math.ceil(tf.math.log(deepest) / math.log(2.0)) - 23.0)
    tau = tf.math.floor(tau / quantum) * quantum
    totals = tf.math.unsorted_segment_sum(tau, samples.ray_indices, rays)
    # Ray r's first sample subtracts ray r - 1's total (empty rays: 0, at the same place).
    restart = tf.math.unsorted_segment_sum(-tf.concat([[0.0], totals], 0)[:-1], samples.ray_offsets,
                                           tf.shape(tau)[0] + 1)[:-1]
    scan = sampling.blocked_cumsum if tau.shape[0] is None else sampling.prefix_sum
    before = scan(tau + restart) - tau
    return before <= limit


def _before_termination(samples, sigma, threshold, num_rays):
    """The samples whose transmittance (before them) is at least `threshold`: a prefix of each ray's."""
    keep = _transmittance_above(samples, sigma, threshold)
    idx = tf.where(keep)[:, 0]
    counts = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int32), samples.ray_indices, num_rays)
    return samples._replace(
        t_starts=tf.gather(samples.t_starts, idx), t_ends=tf.gather(samples.t_ends, idx),
        ray_indices=tf.gather(samples.ray_indices, idx), ray_offsets=tf.math.cumsum(counts, exclusive=True),
        ray_counts=counts)


def _before_termination_static(samples, sigma, threshold, num_rays, budget):
    """_before_termination on RayMarchStaticSamples, into `budget` samples (static shapes): the kept
    samples of the rays taken in order while they fit, padded as ray_march_static pads (t_start =
    t_end = 0 on the last ray); the rays the march dropped stay dropped (num_rays)."""
    valid = tf.range(tf.shape(samples.t_starts)[0]) < samples.num_samples
    keep = tf.logical_and(_transmittance_above(samples, sigma, threshold), valid)
    counts = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int32), samples.ray_indices, num_rays)
    # Rays in order while their kept samples fit the budget, among those the march kept.
    ray_fits = tf.logical_and(sampling.prefix_sum(counts) <= budget, tf.range(num_rays) < samples.num_rays)
    counts = tf.where(ray_fits, counts, 0)
    keep = tf.logical_and(keep, tf.gather(ray_fits, samples.ray_indices))
    num_samples = tf.reduce_sum(counts)
    # Each kept sample's place in the output; the others go to slot `budget`, cut off below.
    slot = tf.where(keep, sampling.prefix_sum(tf.cast(keep, tf.int32), exclusive=True), budget)

    def compact(x):
        return tf.math.unsorted_segment_sum(x, slot, budget + 1)[:budget]

    padding = tf.range(budget) >= num_samples
    return samples._replace(
        t_starts=compact(samples.t_starts), t_ends=compact(samples.t_ends),
        ray_indices=tf.where(padding, tf.maximum(num_rays - 1, 0), compact(samples.ray_indices)),
        ray_offsets=sampling.prefix_sum(counts, exclusive=True), ray_counts=counts, num_samples=num_samples,
        num_rays=tf.reduce_sum(tf.cast(ray_fits, tf.int32)))
