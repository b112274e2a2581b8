"""Ray marching through an occupancy bitfield into packed samples
(ops/ray_march_op.cc; the march is kernels/ray_march/ray_march.h, shared by the
CPU, CUDA and Metal kernels).

Samples are not differentiable (where a ray is sampled is a discrete choice),
so the op has no gradient: gradients flow through what is computed at the
samples (the field and the rendering), as in instant-NGP and nerfacc.
"""
import collections

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
