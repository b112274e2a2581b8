"""Ray sampling: tight AABB bounds, stratified samples, and an occupancy grid.

Every sampler returns interval boundaries `t` [R, S+1] (the layout
`metal_ops.volume_render` takes), sample distances `t_samples` [R, S] (one
inside each interval) and `sigma_scale` [R, S]: the fraction of each interval
that is occupied. Densities are multiplied by it before rendering, so that
sigma_eff * (t[i+1] - t[i]) = sigma * occupied_length: skipped empty space
contributes no optical depth.

Occupancy-grid sampling without dynamic shapes: `num_candidates` equal bins
along the ray (inside the AABB) are looked up in a binary grid; S samples
are drawn by inverting the CDF of the piecewise-constant density
occ + eps, stratified (one per 1/S of probability mass). Interval i then holds
mass Z/S (Z = total mass), so its occupied length is
dt * Z / S - eps * (t[i+1] - t[i]) exactly; with every bin occupied this is
plain stratified sampling.
"""
import numpy as np
import tensorflow as tf


def ray_aabb(origins, dirs, aabb, near, far):
    """Entry/exit distances [R] of rays with the box, clipped to [near, far]; misses get t0 = t1."""
    lo, hi = aabb[0], aabb[1]
    safe = tf.where(tf.abs(dirs) < 1e-9, tf.fill(tf.shape(dirs), 1e-9), dirs)
    inv = 1.0 / safe
    t1 = (lo - origins) * inv
    t2 = (hi - origins) * inv
    t_near = tf.maximum(tf.reduce_max(tf.minimum(t1, t2), axis=-1), near)
    t_far = tf.minimum(tf.reduce_min(tf.maximum(t1, t2), axis=-1), far)
    t_far = tf.maximum(t_far, t_near)
    return t_near, t_far


def blocked_cumsum(x, block=1024):
    """Inclusive cumulative sum of a 1-D tensor in blocks of `block`: within the blocks, then
    their totals. TensorFlow's GPU kernel for a 1-D cumsum runs in one thread block (0.45 ms
    for 2^18 floats on an H200, and it grows with the length); a [rows, block] one runs a
    block per row. The additions come in another order than tf.math.cumsum's:
    the same sums where every partial sum is exact (integers, or multiples of a power of two,
    below 2^24 of them in float32), as the callers' are.
    """
    n = tf.shape(x)[0]
    rows = (n + block - 1) // block
    within = tf.math.cumsum(tf.reshape(tf.pad(x, [[0, rows * block - n]]), [rows, block]), axis=1)
    before = tf.math.cumsum(within[:, -1], exclusive=True)
    return tf.reshape(within + before[:, None], [-1])[:n]


def prefix_sum(x, exclusive=False):
    """Cumulative sum of a 1-D tensor of static length in ceil(log4(n)) passes, each adding three
    shifted copies (Hillis-Steele in radix 4): elementwise work XLA compiles as small fusions.
    XLA lowers tf.math.cumsum to a reduce-window, rewritten into a tree of them, which its GPU
    compiler fused with reductions beside them: one such fusion was the longest kernel of the
    --jit step to compile (docs/NERF.md, "The compiled step"). The additions come in another order
    than tf.math.cumsum's: the same sums where every partial sum is exact (integers, or multiples
    of a power of two below 2^24 of them in float32), as the callers' are.
    """
    n = x.shape[0]
    if n is None:
        raise ValueError("prefix_sum needs a static length (tf.math.cumsum takes a dynamic one)")
    total, shift = x, 1
    while shift < n:
        # one padded copy and three windows of it: fewer ops to trace than a padded copy each
        shifts = [j * shift for j in (1, 2, 3) if j * shift < n]
        padded = tf.pad(total, [[shifts[-1], 0]])
        total = tf.add_n([total] + [tf.slice(padded, [shifts[-1] - s], [n]) for s in shifts])
        shift *= 4
    return total - x if exclusive else total


def first_occupied(mask, tries):
    """For each row of `tries` (cell indices [N, T]), the first cell whose `mask` is positive,
    else the row's last cell: instant-NGP's draw of an occupied cell, uniform over the occupied
    cells where one is found (each try is uniform), a uniform cell where none is."""
    hit = tf.gather(mask, tries) > 0
    t = int(tries.shape[1])
    # the first hit's column; T-1 (the last try) where the row has none
    col = tf.reduce_min(tf.where(hit, tf.range(t, dtype=tries.dtype)[None, :], t - 1), axis=1)
    return tf.gather(tries, col, batch_dims=1)


def stratified(t_near, t_far, num_samples, jitter=True, seed=None):
    """Equal intervals between t_near and t_far, one (jittered) sample in each."""
    r = tf.shape(t_near)[0]
    u = tf.linspace(0.0, 1.0, num_samples + 1)[None, :]
    t = t_near[:, None] + (t_far - t_near)[:, None] * u
    if jitter:
        j = tf.random.uniform((r, num_samples), seed=seed)
    else:
        j = tf.fill((r, num_samples), 0.5)
    ts = t[:, :-1] + (t[:, 1:] - t[:, :-1]) * j
    return t, ts, tf.ones_like(ts)


class OccupancyGrid(tf.Module):
    """A G^3 grid over the AABB of density estimates (EMA of max), thresholded into a bitfield.

    The state is two tf.Variables (saved in checkpoints). `update` evaluates the
    model's density at one jittered point per cell; `occupied_at` looks points up.

    rule "every-cell": each update evaluates every cell; a cell is occupied
    where its opacity, 1 - exp(-sigma * cell size), exceeds `threshold`.
    rule "ngp" (instant-NGP, nerfacc's OccGridEstimator): every cell during the
    first NGP_WARMUP_STEPS steps, then G^3/4 cells drawn uniformly and G^3/4
    drawn as instant-NGP draws occupied ones (first_occupied), the EMA applied
    to those; a cell is occupied where sigma * `threshold_length` (one march
    step) exceeds `threshold`. Both thresholds are lowered to the mean
    estimate (instant-NGP), so a still-faint scene keeps its cells.
    """

    RULES = ("every-cell", "ngp")
    NGP_WARMUP_STEPS = 256
    # instant-NGP's draw of an occupied cell: up to 10 uniform tries, the first occupied one,
    # else the last try. It needs no list or running count of the occupied cells (a cumulative
    # sum over all of them, which XLA lowers as a slow reduce-window): a few gathers.
    OCCUPIED_TRIES = 10

    def __init__(self, aabb, resolution=64, decay=0.8, threshold=0.01, name="occupancy", rule="every-cell",
                 threshold_length=None):
        super().__init__(name=name)
        if rule not in self.RULES:
            raise ValueError(f"OccupancyGrid: rule must be one of {self.RULES}, got {rule!r}")
        self.aabb = tf.constant(aabb, tf.float32)
        self.resolution = int(resolution)
        self.decay = float(decay)
        self.threshold = float(threshold)
        self.rule = rule
        g = self.resolution
        self.density = tf.Variable(tf.zeros([g * g * g]), trainable=False, name="density",
                                   synchronization=tf.VariableSynchronization.ON_WRITE,
                                   aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.mask = tf.Variable(tf.ones([g * g * g]), trainable=False, name="mask",
                                synchronization=tf.VariableSynchronization.ON_WRITE,
                                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        # The cells' integer corners (x fastest) as floats, made once and kept where the ops run
        # (tf.identity: on the GPU where there is one): on a GPU, TensorFlow runs int32
        # arithmetic on the host, milliseconds for a million cells, and a copy over.
        k = np.arange(g, dtype=np.float32)
        self._corners = tf.identity(np.stack(np.meshgrid(k, k, k, indexing="ij")[::-1], -1).reshape(-1, 3))
        extent = self.aabb[1] - self.aabb[0]
        self.cell_size = tf.reduce_max(extent) / g
        self.threshold_length = self.cell_size if threshold_length is None else float(threshold_length)

    def cell_centers(self, seed=None, idx=None):
        """One point per cell (of `idx`, default all): jittered with a stateless `seed` (int64 [2]), else the centre."""
        g = self.resolution
        ijk = self._corners if idx is None else tf.gather(self._corners, idx)
        if seed is None:
            off = tf.fill(tf.shape(ijk), 0.5)
        else:  # stateless: every worker of a multi-worker run draws the same points
            off = tf.random.stateless_uniform(tf.shape(ijk), seed=seed)
        u = (ijk + off) / g
        return self.aabb[0] + u * (self.aabb[1] - self.aabb[0])

    def update(self, density_fn, seed=None, chunk=1 << 17, every_cell=True, commit=None):
        """EMA-max update from `density_fn(points [N,3]) -> sigma [N]`, then re-threshold.

        `chunk`: points a call of density_fn takes at the most (None: all the update's at once).
        `commit` (a bool tensor, or None for True): False computes the update and assigns the
        variables their own values, the same program as a real update (a compilation ahead of it).

        every_cell=False (the ngp rule after its warm-up; needs `seed`) updates
        a random quarter of the cells and a quarter drawn from the occupied ones.
        """
        n = self.resolution ** 3
        if self.rule == "every-cell" or every_cell or seed is None:
            idx = None
            pts = self.cell_centers(seed)
        else:
            quarter = max(n // 4, 1)
            seed = tf.convert_to_tensor(seed, tf.int64)
            # int64 cell indices: TensorFlow keeps int32 concats, minimums and sums of a GPU
            # in host memory, a copy each way.
            uniform = tf.random.stateless_uniform([quarter], seed, 0, n, dtype=tf.int64)
            tries = tf.random.stateless_uniform([quarter, self.OCCUPIED_TRIES], seed + 1, 0, n, dtype=tf.int64)
            extra = first_occupied(self.mask, tries)
            idx = tf.concat([uniform, extra], 0)
            pts = self.cell_centers(seed + 3, idx)
        m = int(pts.shape[0])
        chunk = chunk or m
        sigma = tf.concat([density_fn(pts[i:i + chunk]) for i in range(0, m, chunk)], 0) if m > chunk else \
            density_fn(pts)
        old = self.density.read_value()
        if idx is None:
            new = tf.maximum(old * self.decay, sigma)
        else:  # a cell drawn twice keeps one of its two estimates (nerfacc does the same)
            # a whole assign: a strategy's mirrored variables have no scatter_nd_update
            new = tf.tensor_scatter_nd_update(old, idx[:, None], tf.maximum(tf.gather(old, idx) * self.decay, sigma))
        self.density.assign(new if commit is None else tf.where(commit, new, old))
        if self.rule == "ngp":  # optical thickness of one march step
            sigma_thr = self.threshold / self.threshold_length
            positive = tf.cast(new > 0, tf.float32)
            mean = tf.reduce_sum(new) / tf.maximum(tf.reduce_sum(positive), 1.0)
        else:  # opacity of one cell
            sigma_thr = -tf.math.log(1.0 - self.threshold) / self.cell_size
            mean = tf.reduce_mean(new)
        thr = tf.minimum(sigma_thr, mean)
        mask = tf.cast(new > thr, tf.float32)
        self.mask.assign(mask if commit is None else tf.where(commit, mask, self.mask.read_value()))
        return tf.reduce_mean(mask)

    def _flat_index(self, points):
        g = self.resolution
        u = (points - self.aabb[0]) / (self.aabb[1] - self.aabb[0])
        ijk = tf.clip_by_value(tf.cast(tf.floor(u * g), tf.int32), 0, g - 1)
        return ijk[..., 0] + g * (ijk[..., 1] + g * ijk[..., 2])

    def occupied_at(self, points):
        return tf.gather(self.mask, self._flat_index(points))

    def lookup(self, points):
        """(mask, density estimate) at points."""
        i = self._flat_index(points)
        return tf.gather(self.mask, i), tf.gather(self.density, i)


def occupancy_sample(origins, dirs, t_near, t_far, grid, num_samples, num_candidates=128,
                     eps=1e-2, jitter=True, seed=None, max_optical_depth=10.0, min_cells=3.0):
    """Samples concentrated in occupied cells (see the module docstring).

    Occluded space is skipped too: along the candidates, the grid's density
    estimates (capped so that reaching `max_optical_depth` takes at least
    `min_cells` cells, which keeps a margin for the grid's coarseness) give an
    optical depth; candidates behind depth `max_optical_depth` (transmittance
    below e^-10) count as empty, so samples go to the first surface a ray
    meets, not into the inside of solid objects. The estimates are per cell,
    so a ray that passes an object within about a cell also reaches that depth
    and loses the surface behind it; `max_optical_depth=0` turns this off (the
    training script's default, see examples/nerf/README.md).
    """
    r = tf.shape(t_near)[0]
    nc = num_candidates
    length = t_far - t_near
    dt = length / nc  # [R]
    centers = t_near[:, None] + dt[:, None] * (tf.range(nc, dtype=tf.float32)[None, :] + 0.5)
    pts = origins[:, None, :] + dirs[:, None, :] * centers[..., None]
    occ, dens = grid.lookup(pts)  # [R, NC]: mask in {0, 1}, density estimate
    if max_optical_depth:
        cap = max_optical_depth / (min_cells * grid.cell_size)
        tau = tf.math.cumsum(tf.minimum(dens, cap) * occ * dt[:, None], axis=1, exclusive=True)
        occ = occ * tf.cast(tau < max_optical_depth, occ.dtype)
    w = occ + eps
    cdf = tf.concat([tf.zeros((r, 1)), tf.math.cumsum(w, axis=1)], axis=1)  # [R, NC+1]
    z = cdf[:, -1:]
    u = tf.linspace(0.0, 1.0, num_samples + 1)[None, :] * z  # boundaries in mass units
    if jitter:
        j = tf.random.uniform((r, num_samples), seed=seed)
    else:
        j = tf.fill((r, num_samples), 0.5)
    us = (u[:, :-1] + (u[:, 1:] - u[:, :-1]) * j)

    def invert(m):
        k = tf.searchsorted(cdf, m, side="right") - 1
        k = tf.clip_by_value(k, 0, nc - 1)
        c0 = tf.gather(cdf, k, batch_dims=1)
        wk = tf.gather(w, k, batch_dims=1)
        frac = tf.clip_by_value((m - c0) / wk, 0.0, 1.0)
        return t_near[:, None] + dt[:, None] * (tf.cast(k, tf.float32) + frac)

    t = invert(u)
    ts = invert(us)
    delta = t[:, 1:] - t[:, :-1]
    occ_len = tf.maximum(dt[:, None] * z / num_samples - eps * delta, 0.0)
    scale = tf.where(delta > 1e-9, tf.minimum(occ_len / tf.maximum(delta, 1e-9), 1.0), 0.0)
    return t, ts, scale
