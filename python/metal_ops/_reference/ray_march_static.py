"""RayMarchStatic (metal_ops.ray_march_static) from the float64 reference of
RayMarch (ray_march.py): the march cut to the sample budget,
whole rays in order while their samples fit, the rest of the budget padding
(zero-length intervals of the last ray), and the counts of samples and rays
kept."""
import numpy as np

from . import ray_march


def cut_to_budget(dynamic, rays, budget):
    """RayMarchStatic's seven outputs from RayMarch's five (NumPy): whole rays in order while their samples fit."""
    ts, te, ri, off, cnt = (np.asarray(v) for v in dynamic)
    ends = off.astype(np.int64) + cnt
    kept = int(np.sum(ends <= budget)) if rays else 0  # ends are non-decreasing
    n = int(ends[kept - 1]) if kept else 0
    counts = np.where(np.arange(rays) < kept, cnt, 0).astype(np.int32)
    offsets = np.where(np.arange(rays) < kept, off, n).astype(np.int32)
    pad = budget - n
    pad_ray = max(rays - 1, 0)
    return (np.concatenate([ts[:n], np.zeros(pad, ts.dtype)]), np.concatenate([te[:n], np.zeros(pad, te.dtype)]),
            np.concatenate([ri[:n], np.full(pad, pad_ray, np.int32)]).astype(np.int32), offsets, counts,
            np.int32(n), np.int32(kept))


def reference(origins, directions, near, far, occupancy, aabb, grid_resolution, step_size, sample_budget, **attrs):
    """The seven outputs of RayMarchStatic, the kept samples in float64."""
    dynamic = ray_march.reference(origins, directions, near, far, occupancy, aabb, grid_resolution, step_size, **attrs)
    return cut_to_budget(dynamic, len(origins), sample_budget)


def selftest(inputs, attrs):
    """The self-test's adapter (metal_ops._reference): no gradient (the samples
    are not differentiable)."""
    return list(reference(*inputs[:5], seed=int(inputs[5]), **attrs)), None
