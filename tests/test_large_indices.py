"""64-bit index arithmetic where counts can pass 2^31.

- HashEncode with more than 2^31 output elements (float16 table, 8.4 M points
  x 32 levels x 8 features = 2^31 + 2^18 values, 4.3 GB): rows at the start,
  around flat index 2^31 and at the end match the NumPy reference, so the
  output offset point * L * F + level * F + f is computed in 64 bits.
- Hash-grid level offsets whose total passes 2^31 rows (32 levels of 2^30
  entries): the int64 offsets computed by the op equal the exact Python ones.
- ZeroOut's preserve_index attr beyond 2^31 and 2^32 (int64 attr, no
  truncation to 32 bits).
"""
import os

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.hash_encode import hash_grid_offsets
from tests.reference import hash_encode as ref

pytestmark = pytest.mark.every_device

TWO31 = 2**31


def _available_gib():
    """Free memory in GiB: Linux's MemAvailable, elsewhere (macOS has no
    /proc) the physical memory os.sysconf reports; 0 when neither is known."""
    if os.path.exists("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
        return 0.0
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


def test_level_offsets_past_int32():
    cfg = dict(input_dim=3, num_levels=32, log2_hashmap_size=30, base_resolution=16, per_level_scale=1.5)
    got = hash_grid_offsets(**cfg)
    levels = ref.levels(3, 32, 30, 16, 1.5)
    expected = [lv.offset for lv in levels] + [levels[-1].offset + levels[-1].entries]
    assert list(got) == expected
    assert got[-1] > 8 * TWO31, "the total needs 64 bits"
    assert metal_ops.hash_grid_size(**cfg) == expected[-1]


@pytest.mark.parametrize("preserve", [TWO31 - 1, TWO31, 2**32 + 3])
def test_zero_out_preserve_index_is_not_truncated(preserve):
    """A 32-bit truncation of 2^32 + 3 would be 3 and keep element 3."""
    x = np.arange(1, 9, dtype=np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"preserve_index {preserve} "):
        metal_ops.zero_out(x, preserve_index=preserve)


@pytest.mark.slow  # 4.3 GB and ~15-30 s: kept out of the ASan run (make asan-test uses -m "not slow")
def test_hash_encode_more_than_2_31_output_elements():
    need = 4.3 + 1.0  # output + inputs, reference rows, TF slack
    if _available_gib() < need + 2.0:
        pytest.skip(f"needs about {need:.0f} GiB of free memory, {_available_gib():.1f} GiB available")
    # out_of_range="zero" with most points outside [0, 1]: those rows are
    # written as zeros (cheap), the checked rows are interpolated; the output
    # offsets are the same arithmetic either way.
    grid = dict(num_levels=32, log2_hashmap_size=6, base_resolution=2, per_level_scale=1.25)
    cfg = dict(grid, out_of_range="zero")
    width = 32 * 8
    n = TWO31 // width + 1024  # 2^31 + 2^18 output values
    rows = metal_ops.hash_grid_size(1, **grid)
    rng = np.random.default_rng(0)
    table = rng.normal(size=(rows, 8)).astype(np.float16)
    first_past = TWO31 // width  # the first row whose last values lie past flat index 2^31
    check = np.r_[0:64, first_past - 64:first_past + 64, n - 64:n]
    x = np.full((n, 1), 2.0, np.float32)
    x[check] = rng.uniform(0, 1, size=(check.size, 1))
    x[check[::7]] = 1.5  # some checked rows are zero rows too
    out = metal_ops.hash_encode(x, table, **cfg)
    assert out.shape == (n, width) and out.dtype == tf.float16
    assert n * width > TWO31
    got = out.numpy()[check].astype(np.float64)
    expected = ref.encode(x[check], table, **cfg)
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3)
    assert np.count_nonzero(expected) > 0.5 * expected.size
