"""GaussianTileBinStatic (tile bins into outputs of a static size, what XLA
compiles): against GaussianTileBin and the NumPy reference
(tests/reference/gaussian_tile_bin_static.py) under the budget (the same
bins, padded) and over it (whole Gaussians kept in index order), under
`tf.function(jit_compile=True)` (tests/xla_checks.py), and bad budgets.
On a GPU each case runs on its TF GPU kernel and its XLA CUDA handler too;
the CUDA launchers alone: tests/cuda/test_gaussian_tile_bin_cuda.py."""
import os

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import gaussian_tile_bin_static as ref
from tests.test_gaussian_tile_bin import binned, projected
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import both, compile_error

pytestmark = XLA_MARKS

ATTRS = dict(width=200, height=150, tile_size=16)
metal_glue = os.path.join(os.path.dirname(__file__), "..", "kernels", "gaussian_tile_bin", "gaussian_tile_bin_metal.cc")


def static(means2d, radii, depths, **attrs):
    return [np.asarray(t) for t in metal_ops.gaussian_tile_bin_static(means2d, radii, depths, **attrs)]


@pytest.fixture(scope="module")
def projection():
    return projected(3000, ATTRS["width"], ATTRS["height"], seed=3)


@pytest.mark.parametrize("extra", [0, 1, 777])
def test_under_the_budget_the_bins_are_the_dynamic_ops_padded(projection, extra):
    ids, ranges = binned(*projection, **ATTRS)
    m = len(ids)
    got = static(*projection, max_intersections=m + extra, **ATTRS)
    np.testing.assert_array_equal(got[0][:m], ids)
    np.testing.assert_array_equal(got[0][m:], -1)
    np.testing.assert_array_equal(got[1], ranges)
    assert (int(got[2]), int(got[3])) == (m, len(projection[1]))


@pytest.mark.parametrize("fraction", [0.5, 0.97])
def test_over_the_budget_whole_gaussians_are_kept_in_index_order(projection, fraction):
    m = len(binned(*projection, **ATTRS)[0])
    budget = int(fraction * m)
    got = static(*projection, max_intersections=budget, **ATTRS)
    want = ref.reference(*projection, max_intersections=budget, **ATTRS)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    kept, kept_m = int(got[3]), int(got[2])
    assert 0 < kept < len(projection[1]) and kept_m <= budget
    # The kept entries are the dynamic op's bins of the first `kept` Gaussians alone,
    # and the first Gaussian left out would not have fit.
    ids, ranges = binned(*(v[:kept] for v in projection), **ATTRS)
    np.testing.assert_array_equal(got[0][:kept_m], ids)
    np.testing.assert_array_equal(got[1], ranges)
    assert len(binned(*(v[:kept + 1] for v in projection), **ATTRS)[0]) > budget


@pytest.mark.parametrize("n,budget", [(3000, 5000), (3000, 900), (0, 4)])
def test_gaussian_tile_bin_static_under_xla_is_the_kernels(n, budget):
    inputs = [tf.constant(v) for v in projected(n, ATTRS["width"], ATTRS["height"], seed=n + 1)]
    xla, plain = both(lambda *v: tuple(metal_ops.gaussian_tile_bin_static(*v, max_intersections=budget, **ATTRS)),
                      *inputs)
    for a, b, w in zip(xla, plain, ref.reference(*[v.numpy() for v in inputs], max_intersections=budget, **ATTRS)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, w)


def test_gaussian_tile_bin_static_bad_radii_shape_is_a_compile_error():
    means2d, radii, depths = (tf.constant(v) for v in projected(10, 64, 48))
    message = compile_error(lambda *v: metal_ops.gaussian_tile_bin_static(
        *v, width=64, height=48, max_intersections=8).gaussian_ids, means2d, radii[:7], depths)
    assert "GaussianTileBin: 'radii' must be [N, 2] = [10,2]" in message


@pytest.mark.parametrize("budget,error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), ("8", TypeError),
                                          (True, TypeError)])
def test_bad_budget_names_max_intersections(budget, error):
    means2d, radii, depths = projected(10, 64, 48)
    with pytest.raises(error, match="gaussian_tile_bin_static: 'max_intersections' must be an integer >= 1"):
        metal_ops.gaussian_tile_bin_static(means2d, radii, depths, width=64, height=48, max_intersections=budget)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="max_intersections"):
        metal_ops.load_library().metal_ops_gaussian_tile_bin_static(means2d, radii, depths, width=64, height=48,
                                                                     max_intersections=0)


@pytest.mark.source_tree("the op's Metal glue")
def test_the_static_op_has_the_dynamic_ops_kernels_and_xlas():
    """The TF kernels of GaussianTileBin (the CPU's, and CUDA's in a CUDA
    build), plus XLA's; and a tensorflow-metal kernel beside the dynamic op's."""
    from tensorflow.python.framework import kernels

    metal_ops.load_library()
    devices = lambda op: {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}  # noqa: E731
    static = devices("MetalOpsGaussianTileBinStatic")
    assert "CPU" in static and static - {"XLA_CPU_JIT", "XLA_GPU_JIT"} == devices("MetalOpsGaussianTileBin"), static
    with open(metal_glue, encoding="utf-8") as f:
        glue = f.read()
    assert '"MetalOpsGaussianTileBin"' in glue and '"MetalOpsGaussianTileBinStatic"' in glue
