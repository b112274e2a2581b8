"""Ray marching through an occupancy bitfield into packed samples
(kernels/ray_march/ray_march_op.cc; the march is kernels/ray_march/ray_march.h,
shared by the CPU, CUDA and Metal kernels).

Samples are not differentiable (where a ray is sampled is a discrete choice),
so the op has no gradient: gradients flow through what is computed at the
samples (the field and the rendering), as in instant-NGP and nerfacc.
"""
import collections
import math

import numpy as np
import tensorflow as tf

from metal_ops._args import float_tensor, op_attrs
from metal_ops._loader import load_library

RayMarchSamples = collections.namedtuple(
    "RayMarchSamples", ["t_starts", "t_ends", "ray_indices", "ray_offsets", "ray_counts"])
RayMarchSamples.__doc__ = """Packed samples, ordered by ray.

t_starts, t_ends: [N] float32, each sample's interval along its ray.
ray_indices: [N] int32, the ray of each sample.
ray_offsets, ray_counts: [R] int32; ray r's samples are
  [ray_offsets[r], ray_offsets[r] + ray_counts[r]).
"""


RayMarchStaticSamples = collections.namedtuple(
    "RayMarchStaticSamples", RayMarchSamples._fields + ("num_samples", "num_rays"))
RayMarchStaticSamples.__doc__ = """Packed samples in outputs of a static size S (`ray_march_static`).

t_starts, t_ends: [S] float32; ray_indices: [S] int32. Samples
  [0, num_samples) are `ray_march`'s first num_samples samples; the others
  are padding: t_start = t_end = 0, ray index max(R - 1, 0).
ray_offsets, ray_counts: [R] int32 over the kept samples; rays from num_rays
  on have count 0 and offset num_samples.
num_samples, num_rays: int32 scalars, the samples and rays kept.
"""


def ray_march(origins, directions, near, far, occupancy, aabb, grid_resolution, step_size, cone_angle=0.0,
              max_step_size=1e10, max_samples=1024, jitter=False, seed=0, name=None):
    """Marches rays through an occupancy bitfield and returns the samples in occupied cells.

    Steps are dt(t) = clamp(t * cone_angle, step_size, max_step_size) (constant
    for cone_angle = 0, instant-NGP's cone stepping otherwise). A step is kept
    when its midpoint lies in an occupied cell of the finest cascade holding
    it; from an empty cell the march jumps to where the ray leaves the cell.

    Args:
      origins, directions: [R, 3] float32. t is measured in units of the
        direction's length.
      near, far: [R] float32 bounds, clipped to the outermost cascade's box.
      occupancy: [C, ceil(G^3 / 8)] uint8 bitfield (`pack_occupancy`);
        cascade c covers `aabb` scaled by 2^c about its centre.
      aabb: 6 floats, cascade 0's box [min_x, min_y, min_z, max_x, max_y, max_z].
      grid_resolution: G, cells per axis of every cascade.
      step_size, cone_angle, max_step_size: the step rule above.
      max_samples: at most this many samples per ray.
      jitter: offset each ray's first step by u * dt, u in [0, 1) a hash of
        (seed, ray index): deterministic for a given seed.
      seed: int32 scalar (a tensor can change every step without retracing).

    Returns:
      RayMarchSamples. Rays that miss the box or cross only empty cells get
      no samples.
    """
    with tf.name_scope(name or "ray_march"):
        out = load_library().metal_ops_ray_march(
            *_inputs(origins, directions, near, far, occupancy, seed),
            **_attrs("ray_march", aabb, grid_resolution, step_size, cone_angle, max_step_size, max_samples, jitter))
        return RayMarchSamples(*out)


def ray_march_static(origins, directions, near, far, occupancy, aabb, grid_resolution, step_size, sample_budget,
                     cone_angle=0.0, max_step_size=1e10, max_samples=1024, jitter=False, seed=0, name=None):
    """`ray_march` into outputs of a static size, `sample_budget` samples: what XLA compiles.

    Rays are taken in order while their samples fit in the budget, each with
    all of its samples; the rays after the first one that does not fit get
    none (`num_rays` says how many were kept, so a training step can mask the
    others out of its loss). The kept samples are `ray_march`'s first
    `num_samples`; the rest of the outputs is padding that
    `packed_volume_render(..., num_samples=...)` skips. The march costs what
    `ray_march`'s does; whatever runs on the samples afterwards runs on all
    `sample_budget` of them, padding included (docs/XLA.md).

    Args: `ray_march`'s, plus
      sample_budget: S >= 0, the size of the sample outputs.

    Returns:
      RayMarchStaticSamples.
    """
    with tf.name_scope(name or "ray_march_static"):
        out = load_library().metal_ops_ray_march_static(
            *_inputs(origins, directions, near, far, occupancy, seed),
            **_attrs("ray_march_static", aabb, grid_resolution, step_size, cone_angle, max_step_size, max_samples,
                     jitter),
            **op_attrs("ray_march_static", "MetalOpsRayMarchStatic", sample_budget=sample_budget))
        return RayMarchStaticSamples(*out)


def _inputs(origins, directions, near, far, occupancy, seed):
    occ_dtype = getattr(occupancy, "dtype", None)
    if occ_dtype is not None and tf.as_dtype(occ_dtype) != tf.uint8:
        raise TypeError(f"ray_march: 'occupancy' must be a uint8 bitfield (see pack_occupancy), "
                        f"got {tf.as_dtype(occ_dtype).name}")
    return (float_tensor("ray_march", "origins", origins), float_tensor("ray_march", "directions", directions),
            float_tensor("ray_march", "near", near), float_tensor("ray_march", "far", far),
            tf.convert_to_tensor(occupancy, dtype=tf.uint8),
            tf.convert_to_tensor(seed, dtype=tf.int32))


def _attrs(owner, aabb, grid_resolution, step_size, cone_angle, max_step_size, max_samples, jitter):
    return dict(aabb=[float(v) for v in np.ravel(aabb)],
                **op_attrs(owner, "MetalOpsRayMarch", grid_resolution=grid_resolution, step_size=step_size,
                           cone_angle=cone_angle, max_step_size=max_step_size, max_samples=max_samples,
                           jitter=jitter))


def pack_occupancy(grid, name=None):
    """Packs a boolean occupancy grid into the bitfield `ray_march` takes.

    Args:
      grid: [C, G, G, G] indexed [cascade, z, y, x], or [C, G^3] flattened
        with cell (x, y, z) at x + G (y + G z) (the layout of the NeRF sample's
        occupancy mask); any dtype, nonzero is occupied.

    Returns:
      [C, ceil(G^3 / 8)] uint8: cell i of cascade c is bit i % 8 (least
      significant first) of byte i // 8.
    """
    with tf.name_scope(name or "pack_occupancy"):
        grid = tf.convert_to_tensor(grid)
        _check_cubic(grid.shape)
        cascades = tf.shape(grid)[0]
        # float32 sums (exact: at most 255): a GPU keeps int32 products and sums in host memory
        bits = tf.cast(tf.not_equal(tf.reshape(grid, [cascades, -1]), tf.zeros([], grid.dtype)), tf.float32)
        cells = tf.shape(bits)[1]
        bits = tf.pad(bits, [[0, 0], [0, (-cells) % 8]])
        bits = tf.reshape(bits, [cascades, -1, 8])
        weights = tf.constant([1, 2, 4, 8, 16, 32, 64, 128], tf.float32)
        return tf.cast(tf.reduce_sum(bits * weights, axis=-1), tf.uint8)


def _check_cubic(shape):
    """pack_occupancy's grid: [C, G, G, G] or [C, G^3] (the sizes known when traced)."""
    dims = shape.as_list() if shape.rank is not None else None
    cells = dims[1] if dims is not None and len(dims) == 2 else None
    cubic = (dims is not None and len(dims) in (2, 4)
             and (len(dims) == 2 and (cells is None or round(cells ** (1 / 3)) ** 3 == cells)
                  or len(dims) == 4 and len({d for d in dims[1:] if d is not None}) <= 1))
    if not cubic:
        raise ValueError(f"pack_occupancy: 'grid' must be [C, G, G, G] or [C, G^3] (G cells along each axis), "
                         f"got shape {tuple(dims) if dims is not None else shape}")


tf.no_gradient("MetalOpsRayMarch")
tf.no_gradient("MetalOpsRayMarchStatic")


# ---- the self-test's cases and comparisons (python -m metal_ops.selftest) --------------------

# The rays of the large RayMarch and RayMarchStatic cases on a machine without a
# GPU: their reference marches ray by ray in Python (about a millisecond a ray).
CPU_ONLY_MARCH_RAYS = 2048


def _selftest_march(rng, r, g, cascades, cone, jitter):
    """RayMarch's inputs (r rays from around an occupancy grid of `cascades`
    cascades of g^3 cells, seed 7) and attributes; RayMarchStatic takes the
    same with a sample_budget."""
    origins = rng.uniform(-3, 3, (r, 3)).astype(np.float32)
    dirs = (rng.uniform(-1, 2, (r, 3)) - origins).astype(np.float32)
    dirs /= np.maximum(np.linalg.norm(dirs, axis=1, keepdims=True), 1e-6)
    near = np.zeros(r, np.float32)
    far = np.full(r, 10.0, np.float32)
    bits = pack_occupancy(rng.uniform(size=(cascades, g, g, g)) < 0.3).numpy()
    attrs = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.01, cone_angle=cone,
                 max_step_size=0.1, jitter=jitter)
    return [origins, dirs, near, far, bits, np.int32(7)], attrs


def selftest_cases(cpu_only=False):
    """The self-test's cases of RayMarch and RayMarchStatic: sample positions,
    integer outputs compared exactly, no gradient; each compared ray by ray
    (compare_ray_march, compare_ray_march_static). RayMarchStatic runs on a
    GPU under XLA only (outside XLA it has a CPU kernel only): its cases are
    XLA_ONLY, compared with the same XLA function on the CPU (the host
    handler). Without a GPU the large cases march CPU_ONLY_MARCH_RAYS rays."""
    from metal_ops import selftest

    out = []
    rng = selftest.rng("ray_march")
    for r, g, cascades, cone, jitter in [(301, 16, 1, 0.0, False), (0, 8, 1, 0.0, False),
                                         (65536, 64, 2, 0.01, True)]:
        r = min(r, CPU_ONLY_MARCH_RAYS) if cpu_only else r
        inputs, attrs = _selftest_march(rng, r, g, cascades, cone, jitter)
        out.append(selftest.case("ray_march", f"rays={r} G={g} C={cascades} cone={cone} jitter={jitter}", np.float32,
                                 inputs, lambda o, d, n, f, b, s, a=attrs: tuple(ray_march(o, d, n, f, b, seed=s, **a)),
                                 1e-5, attrs, differentiable=False, compare=compare_ray_march))
    rng = selftest.rng("ray_march_static")
    # Budgets: above the total (padding), below it (rays cut), none.
    for r, g, cascades, cone, jitter, budget in [(301, 16, 1, 0.0, False, 20000), (301, 16, 1, 0.0, True, 1500),
                                                  (0, 8, 1, 0.0, False, 64), (17, 8, 1, 0.0, False, 0),
                                                  (65536, 64, 2, 0.01, True, 1 << 20)]:
        r = min(r, CPU_ONLY_MARCH_RAYS) if cpu_only else r
        inputs, attrs = _selftest_march(rng, r, g, cascades, cone, jitter)
        attrs["sample_budget"] = budget
        out.append(selftest.case(
            "ray_march_static", f"rays={r} G={g} C={cascades} cone={cone} jitter={jitter} budget={budget}",
            np.float32, inputs,
            lambda o, d, n, f, b, s, a=attrs: tuple(ray_march_static(o, d, n, f, b, seed=s, **a)),
            1e-5, attrs, differentiable=False, compare=compare_ray_march_static, xla=selftest.XLA_ONLY))
    return out


# RayMarch: where a ray's samples fall is decided at cell boundaries (a step is
# kept when its midpoint lies in an occupied cell), so one ulp of rounding (the
# GPU compiler contracting a * b + c into one fma where the CPU's does not) can
# move a midpoint across a boundary and change that ray's samples: one sample
# more or fewer, or the rest of an occupied run shifted by half a step; a ray
# grazing a cell face can meet that twice. The comparison checks what such a
# flip cannot change: each side's packing (offsets the prefix sum of the
# counts, each sample's ray index, sorted disjoint intervals); the samples of
# every other ray, to the case's tolerance (a ray none of whose samples moved
# by a quarter of its own length is such a ray: a flip moves them by half a
# step); and for the flipped rays, that they are few, that their counts are
# within RAY_MARCH_MAX_COUNT_CHANGE and that the length of ray sampled on one
# side only is at most RAY_MARCH_MAX_LENGTH_CHANGE of their steps.
RAY_MARCH_MAX_FLIPPED = 0.01        # fraction of the rays (at least one ray)
RAY_MARCH_MAX_COUNT_CHANGE = 2      # samples, per ray
RAY_MARCH_MAX_LENGTH_CHANGE = 3.0   # in units of the ray's longest step


def _ray_march_packing(result, side):
    """Why a RayMarch result (t_starts, t_ends, ray_indices, ray_offsets,
    ray_counts) is not a valid packing, or None."""
    t0, t1, idx, off, cnt = (np.asarray(a) for a in result)
    n, r = t0.shape[0] if t0.ndim == 1 else -1, cnt.shape[0] if cnt.ndim == 1 else -1
    if n < 0 or r < 0 or t1.shape != (n,) or idx.shape != (n,) or off.shape != (r,):
        return f"{side}: shapes {[np.shape(a) for a in result]}, not [N] x 3 and [R] x 2"
    cnt = cnt.astype(np.int64)
    if np.any(cnt < 0) or int(cnt.sum()) != n:
        return f"{side}: ray_counts sum to {int(cnt.sum())} (or are negative) for {n} samples"
    if not np.array_equal(off.astype(np.int64), np.cumsum(cnt) - cnt):
        return f"{side}: ray_offsets are not the prefix sum of ray_counts"
    if not np.array_equal(idx.astype(np.int64), np.repeat(np.arange(r), cnt)):
        return f"{side}: ray_indices do not name each sample's ray"
    with np.errstate(invalid="ignore"):
        if not np.all(t0 < t1):
            return f"{side}: a sample with t_start >= t_end (or NaN)"
        same_ray = idx[1:] == idx[:-1]
        if np.any(t1[:-1][same_ray] > t0[1:][same_ray]):
            return f"{side}: a ray's samples are not sorted and disjoint"
    return None


def _sampled_length_change(a0, a1, b0, b1):
    """The length of ray inside one set of sorted disjoint intervals and not the
    other: |A| + |B| - 2 |A n B|."""
    both, i, j = 0.0, 0, 0
    while i < len(a0) and j < len(b0):
        both += max(0.0, min(a1[i], b1[j]) - max(a0[i], b0[j]))
        if a1[i] < b1[j]:
            i += 1
        else:
            j += 1
    return float(np.sum(a1 - a0) + np.sum(b1 - b0) - 2.0 * both)


def compare_ray_march(got, want, names=None, tolerance=0.0):
    """(error, note) for RayMarch's five outputs (robust to one-ulp flips at
    cell boundaries; see above): the largest |device - cpu| / max(1, |cpu|) of
    t_starts and t_ends over the rays that did not flip; inf when a packing is
    invalid or the flipped rays break a limit."""
    if len(got) != 5 or len(want) != 5 or any(a is None for a in list(got) + list(want)):
        return math.inf, f"{len(got)} results on the device, {len(want)} expected (RayMarch has 5)"
    for result, side in ((got, "device"), (want, "expected")):
        problem = _ray_march_packing(result, side)
        if problem:
            return math.inf, problem
    g0, g1, _, g_off, g_cnt = (np.asarray(a) for a in got)
    w0, w1, w_idx, w_off, w_cnt = (np.asarray(a) for a in want)
    rays = len(w_cnt)
    if len(g_cnt) != rays:
        return math.inf, f"{len(g_cnt)} rays on the device, {rays} expected"
    g_cnt, w_cnt = g_cnt.astype(np.int64), w_cnt.astype(np.int64)
    g_off, w_off = g_off.astype(np.int64), w_off.astype(np.int64)
    # Rays with equal counts, sample k against sample k: the relative error and
    # how far each sample moved against its own length.
    ray = w_idx.astype(np.int64)
    aligned = g_cnt[ray] == w_cnt[ray]
    at = g_off[ray[aligned]] + (np.arange(len(w0))[aligned] - w_off[ray[aligned]])
    length = w1[aligned].astype(np.float64) - w0[aligned]
    ray_error, moved = np.zeros(rays), np.zeros(rays)
    for g, w in ((g0, w0), (g1, w1)):
        wa = w[aligned].astype(np.float64)
        diff = np.abs(g[at].astype(np.float64) - wa)
        np.maximum.at(moved, ray[aligned], diff / length)
        np.maximum.at(ray_error, ray[aligned], diff / np.maximum(1.0, np.abs(wa)))
    flipped = (g_cnt != w_cnt) | ~(moved < 0.25)
    limit = max(1, math.ceil(RAY_MARCH_MAX_FLIPPED * rays))
    if int(flipped.sum()) > limit:
        return math.inf, (f"{int(flipped.sum())} of {rays} rays sampled differently (at most {limit} may: "
                          f"one-ulp flips at cell boundaries)")
    for r in np.flatnonzero(flipped):
        if abs(int(g_cnt[r] - w_cnt[r])) > RAY_MARCH_MAX_COUNT_CHANGE:
            return math.inf, f"ray {r}: {g_cnt[r]} samples on the device, {w_cnt[r]} expected"
        gs, ws = slice(g_off[r], g_off[r] + g_cnt[r]), slice(w_off[r], w_off[r] + w_cnt[r])
        a0, a1 = g0[gs].astype(np.float64), g1[gs].astype(np.float64)
        b0, b1 = w0[ws].astype(np.float64), w1[ws].astype(np.float64)
        step = max(np.max(a1 - a0, initial=0.0), np.max(b1 - b0, initial=0.0))
        change = _sampled_length_change(a0, a1, b0, b1)
        if not change <= RAY_MARCH_MAX_LENGTH_CHANGE * step:
            return math.inf, (f"ray {r}: a length of {change:.3g} sampled on one side only, more than "
                              f"{RAY_MARCH_MAX_LENGTH_CHANGE:g} steps of {step:.3g}")
    error = float(np.max(ray_error[~flipped], initial=0.0))
    note = f"{int(flipped.sum())} rays flipped at cell boundaries" if flipped.any() else ""
    return error, note


def _ray_march_static_problem(result, side, budget):
    """Why a RayMarchStatic result (the five outputs of RayMarch, num_samples,
    num_rays) is not a valid static packing, or None."""
    t0, t1, idx, off, cnt, n, k = (np.asarray(a) for a in result)
    rays = cnt.shape[0] if cnt.ndim == 1 else -1
    if t0.shape != (budget,) or t1.shape != (budget,) or idx.shape != (budget,) or off.shape != (rays,) \
            or n.shape != () or k.shape != ():
        return f"{side}: shapes {[np.shape(a) for a in result]}, not [{budget}] x 3, [R] x 2 and two scalars"
    n, k = int(n), int(k)
    if not (0 <= n <= budget and 0 <= k <= rays):
        return f"{side}: num_samples {n}, num_rays {k} out of range"
    if np.any(cnt[k:] != 0) or np.any(off[k:] != n) or int(cnt[:k].astype(np.int64).sum()) != n:
        return f"{side}: rays from num_rays on are not empty at num_samples, or the kept counts do not sum to it"
    pad = max(rays - 1, 0)
    if np.any(t0[n:] != 0) or np.any(t1[n:] != 0) or np.any(idx[n:] != pad):
        return f"{side}: the samples from num_samples on are not [0, 0] intervals of ray {pad}"
    return None


def compare_ray_march_static(got, want, names=None, tolerance=0.0):
    """(error, note) for RayMarchStatic's seven outputs: each side's padding
    and layout exactly, and the rays both sides kept by compare_ray_march (a
    flip at a cell boundary can also move the cut by a ray)."""
    if len(got) != 7 or len(want) != 7 or any(a is None for a in list(got) + list(want)):
        return math.inf, f"{len(got)} results on the device, {len(want)} expected (RayMarchStatic has 7)"
    budget = np.shape(want[0])[0] if np.ndim(want[0]) == 1 else -1
    for result, side in ((got, "device"), (want, "expected")):
        problem = _ray_march_static_problem(result, side, budget)
        if problem:
            return math.inf, problem
    k_got, k_want = int(got[6]), int(want[6])
    rays = len(want[4])
    if abs(k_got - k_want) > max(1, math.ceil(RAY_MARCH_MAX_FLIPPED * rays)):
        return math.inf, f"{k_got} rays kept on the device, {k_want} expected"
    kept = min(k_got, k_want)

    def head(result):  # the packing of the first `kept` rays
        t0, t1, idx, off, cnt = (np.asarray(a) for a in result[:5])
        end = int(off[kept]) if kept < int(result[6]) else int(result[5])
        return [t0[:end], t1[:end], idx[:end], off[:kept], cnt[:kept]]

    error, note = compare_ray_march(head(got), head(want), tolerance=tolerance)
    if k_got != k_want:
        note = (note + "; " if note else "") + f"{k_got} rays kept on the device, {k_want} expected"
    return error, note
