"""Fuzzing GaussianProject and GaussianTileBin through their public
functions: random scenes (N from 0, random camera poses and intrinsics,
image sizes, the attributes, the opacities) against the float64 NumPy references
(tests/reference/gaussian_project.py, gaussian_tile_bin.py), the projection's
bins against the reference's sort; then one bad value at a time in a valid
call, which must be rejected naming the argument."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from metal_ops.gaussian_project import scene
from tests.fuzz.strategies import eager_or_graph, expect_rejected, fuzz_settings
from tests.reference import gaussian_tile_bin as bin_ref
from tests.test_gaussian_project import check_against_reference, ref


@st.composite
def projection_case(draw):
    n = draw(st.sampled_from([0, 1, 2, 17, 300]))
    width, height = draw(st.sampled_from([(1, 1), (16, 9), (64, 48), (333, 200)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    means, quats, scales, viewmat, k = scene(rng, n, width, height)
    angle = draw(st.floats(-0.6, 0.6))
    c, s = np.cos(angle), np.sin(angle)
    viewmat[:3, :3] = viewmat[:3, :3] @ np.array([[1, 0, 0], [0, c, -s], [0, s, c]], np.float32)
    k[0, 0] *= draw(st.sampled_from([0.3, 1.0, 4.0]))
    attrs = {"width": width, "height": height, "eps2d": draw(st.sampled_from([0.0, 0.3, 2.0])),
             "near_plane": draw(st.sampled_from([0.01, 1.0]))}
    if draw(st.booleans()):  # opacities: some culled (below 1/255), some above 1 (extent capped at 3.33)
        attrs["opacities"] = rng.uniform(0, 1.2, n).astype(np.float32)
    return [means, quats, scales, viewmat.astype(np.float32), k], attrs


@fuzz_settings(max_examples_fraction=0.5)
@given(case=projection_case(), graph=st.booleans(), tile_size=st.sampled_from([1, 8, 16]))
def test_projection_and_bins_match_the_references(case, graph, tile_size):
    inputs, attrs = case
    fn = eager_or_graph(lambda *v: metal_ops.gaussian_project(*v, **attrs), graph)
    got = [t.numpy() for t in fn(*inputs)]
    check_against_reference(got, ref.project(*inputs, **attrs))
    size = {"width": attrs["width"], "height": attrs["height"]}
    ids, ranges = metal_ops.gaussian_tile_bin(got[0], got[3], got[2], tile_size=tile_size, **size)
    want_ids, want_ranges = bin_ref.tile_bin(got[0], got[3], got[2], tile_size=tile_size, **size)
    np.testing.assert_array_equal(ranges.numpy(), want_ranges)
    np.testing.assert_array_equal(ids.numpy(), want_ids)


BAD_VALUES = [(0, np.nan), (0, np.inf), (1, 0.0), (1, np.nan), (2, 0.0), (2, -1.0), (2, np.nan), (2, np.inf)]


@fuzz_settings(max_examples_fraction=0.5)
@given(case=projection_case(), bad=st.sampled_from(BAD_VALUES), graph=st.booleans(), data=st.data())
def test_projection_rejects_one_bad_value(case, bad, graph, data):
    inputs, attrs = case
    if inputs[0].shape[0] == 0:
        return
    which, value = bad
    i = data.draw(st.integers(0, inputs[0].shape[0] - 1))
    if which == 1 and value == 0.0:
        inputs[1][i] = 0.0  # the whole quaternion
    else:
        inputs[which][i, data.draw(st.integers(0, inputs[which].shape[1] - 1))] = value
    fn = eager_or_graph(lambda *v: metal_ops.gaussian_project(*v, **attrs), graph)
    expect_rejected(lambda: fn(*inputs), ("means", "quats", "scales")[which])
