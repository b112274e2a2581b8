"""GaussianTileBin CUDA kernels (CUB scan and radix sort) vs the NumPy
reference (tests/reference/gaussian_tile_bin.py), and GaussianTileBinStatic's
launcher vs its reference (tests/reference/gaussian_tile_bin_static.py),
through the harness (GPU machines only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from metal_ops.gaussian_project import scene
from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import gaussian_project as project_ref
from tests.reference import gaussian_tile_bin as ref
from tests.reference import gaussian_tile_bin_static as static_ref


def bind(lib):
    i32, i64, vp = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    lib.metal_ops_gaussian_tile_bin_count_scratch_bytes.argtypes = [i64]
    lib.metal_ops_gaussian_tile_bin_count_scratch_bytes.restype = i64
    lib.metal_ops_gaussian_tile_bin_count.argtypes = [vp, vp, i64, i32, i32, i32, vp, vp, vp, i64, vp]
    lib.metal_ops_gaussian_tile_bin_sort_scratch_bytes.argtypes = [i64, i32, i32, i32]
    lib.metal_ops_gaussian_tile_bin_sort_scratch_bytes.restype = i64
    lib.metal_ops_gaussian_tile_bin_sort.argtypes = [vp, vp, vp, i64, i32, i32, i32, vp, i64, vp, vp, vp, i64, vp]
    lib.metal_ops_gaussian_tile_bin_static_scratch_bytes.argtypes = [i64, i32, i32, i32, i32]
    lib.metal_ops_gaussian_tile_bin_static_scratch_bytes.restype = i64
    lib.metal_ops_gaussian_tile_bin_static.argtypes = [vp, vp, vp, i64, i32, i32, i32, i32, vp, vp, vp, vp, i64, vp]
    return lib


def run(cupy, lib, means2d, radii, depths, width, height, tile_size):
    lib = bind(lib)
    n = len(radii)
    tiles = -(-width // tile_size) * -(-height // tile_size)
    d_m, d_r, d_d = cupy.asarray(means2d), cupy.asarray(radii), cupy.asarray(depths)
    s = stream_ptr(cupy)
    offsets, total = cupy.zeros(max(n, 1), cupy.int64), cupy.zeros(1, cupy.int64)
    m = 0
    if n:
        bytes_ = lib.metal_ops_gaussian_tile_bin_count_scratch_bytes(n)
        scratch = cupy.empty(bytes_, cupy.uint8)
        check(lib.metal_ops_gaussian_tile_bin_count(dptr(d_m), dptr(d_r), n, width, height, tile_size, dptr(offsets),
                                                    dptr(total), dptr(scratch), bytes_, s))
        cupy.cuda.get_current_stream().synchronize()
        m = int(total.get()[0])
    ids, ranges = cupy.full(max(m, 1), -1, cupy.int32), cupy.full((tiles, 2), -1, cupy.int32)
    bytes_ = lib.metal_ops_gaussian_tile_bin_sort_scratch_bytes(m, width, height, tile_size) if m else 0
    scratch = cupy.empty(max(bytes_, 1), cupy.uint8)
    check(lib.metal_ops_gaussian_tile_bin_sort(dptr(d_m), dptr(d_r), dptr(d_d), n, width, height, tile_size,
                                               dptr(offsets), m, dptr(ids), dptr(ranges), dptr(scratch), bytes_, s))
    cupy.cuda.get_current_stream().synchronize()
    return ids.get()[:m], ranges.get()


@pytest.mark.parametrize("n,width,height,tile_size", [(1, 64, 48, 16), (1000, 64, 48, 16), (100_000, 800, 600, 16),
                                                      (5000, 200, 150, 8), (0, 64, 48, 16)])
def test_matches_numpy(n, width, height, tile_size):
    cupy, lib = require_gpu()
    inputs = scene(np.random.default_rng(n), n, width, height)
    means2d, _, depths, radii = project_ref.project(*inputs, width, height)
    means2d, depths = means2d.astype(np.float32), depths.astype(np.float32)
    ids, ranges = run(cupy, lib, means2d, radii, depths, width, height, tile_size)
    want_ids, want_ranges = ref.tile_bin(means2d, radii, depths, width, height, tile_size)
    np.testing.assert_array_equal(ranges, want_ranges)
    np.testing.assert_array_equal(ids, want_ids)


@pytest.mark.parametrize("n,budget", [(1000, 1 << 16), (1000, 2000), (100_000, 150_000), (0, 8)])
def test_static_matches_numpy(n, budget):
    cupy, lib = require_gpu()
    lib = bind(lib)
    width, height, tile_size = 800, 600, 16
    inputs = scene(np.random.default_rng(n), n, width, height)
    means2d, _, depths, radii = project_ref.project(*inputs, width, height)
    means2d, depths = means2d.astype(np.float32), depths.astype(np.float32)
    tiles = -(-width // tile_size) * -(-height // tile_size)
    ids, ranges, counts = (cupy.full(budget, 7, cupy.int32), cupy.full((tiles, 2), 7, cupy.int32),
                           cupy.full(2, 7, cupy.int32))
    bytes_ = lib.metal_ops_gaussian_tile_bin_static_scratch_bytes(n, width, height, tile_size, budget)
    scratch = cupy.empty(bytes_, cupy.uint8)
    d_m, d_r, d_d = (cupy.asarray(v) for v in (means2d.reshape(-1, 2), radii, depths))
    check(lib.metal_ops_gaussian_tile_bin_static(dptr(d_m), dptr(d_r), dptr(d_d), n, width, height, tile_size, budget,
                                                 dptr(ids), dptr(ranges), dptr(counts), dptr(scratch), bytes_,
                                                 stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    want = static_ref.reference(means2d, radii, depths, width, height, budget, tile_size)
    np.testing.assert_array_equal(ids.get(), want[0])
    np.testing.assert_array_equal(ranges.get(), want[1])
    np.testing.assert_array_equal(counts.get(), [want[2], want[3]])
