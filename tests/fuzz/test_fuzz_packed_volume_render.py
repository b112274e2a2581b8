"""Fuzzing PackedVolumeRender through the public API: random packed layouts
(rays without samples, zero-width intervals, huge densities), float32 and
float64, eager and graph, against tests/reference/packed_volume_render.py,
then one mutation at a time of a valid call, which must be rejected naming
the argument."""
import numpy as np
import tensorflow as tf
from hypothesis import assume, given
from hypothesis import strategies as st

import metal_ops
from tests.reference import packed_volume_render as ref
from tests.fuzz.render_checks import (assert_gradients_finite, assert_matches_reference, common_mutation,
                                      draw_common, rejects_one_bad_argument)
from tests.fuzz.strategies import expect_rejected, flush_denormals, fuzz_settings


@st.composite
def packed_case(draw):
    R = draw(st.sampled_from([0, 1, 2, 5, 17]))
    max_count = draw(st.sampled_from([0, 1, 3, 8, 33]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale, bg, eps, cast = draw_common(draw, rng, R)
    counts = rng.integers(0, max_count + 1, size=R).astype(np.int32)
    offsets = (np.cumsum(counts) - counts).astype(np.int32)
    N = int(counts.sum())
    sigma = rng.uniform(0, scale, size=N)
    if N and draw(st.booleans()):
        sigma[rng.integers(0, N, size=2)] = draw(st.sampled_from([0.0, 1e-45, 1e30]))
    origin = draw(st.sampled_from([0.0, 2.0, 1e3]))
    t0 = origin + np.cumsum(rng.uniform(0, draw(st.sampled_from([1e-3, 0.1, 1.0])), size=N))
    t1 = t0 + rng.uniform(0, 0.1, size=N) * (rng.random(N) > 0.1)  # some zero-width intervals
    rgb = rng.uniform(0, 1, size=(N, 3))
    return cast(sigma), cast(rgb), cast(t0), cast(t1), offsets, counts, cast(bg), eps


@fuzz_settings()
@given(case=packed_case(), graph=st.booleans(), return_weights=st.booleans())
def test_packed_volume_render_matches_reference(case, graph, return_weights):
    sigma, rgb, t0, t1, offsets, counts, bg, eps = case
    ft = flush_denormals
    assume(ref.margin_ok(ft(sigma), ft(t0), ft(t1), offsets, counts, eps,
                         margin=1e-3 if sigma.dtype == np.float32 else 1e-9))
    fn = tf.function(metal_ops.packed_volume_render) if graph else metal_ops.packed_volume_render
    out = fn(sigma, rgb, t0, t1, offsets, counts, background=bg, early_termination=eps,
             return_weights=return_weights)
    expected = ref.render(ft(sigma), ft(rgb), ft(t0), ft(t1), offsets, counts, None if bg is None else ft(bg), eps)
    assert_matches_reference(out, expected, sigma.dtype, t1, return_weights)


@fuzz_settings(max_examples_fraction=0.5)
@given(case=packed_case())
def test_packed_volume_render_gradients_are_finite(case):
    sigma, rgb, t0, t1, offsets, counts, bg, eps = case
    assert_gradients_finite(
        lambda s, c, b: metal_ops.packed_volume_render(s, c, t0, t1, offsets, counts, background=b,
                                                       early_termination=eps, return_weights=True),
        sigma, rgb, bg, t1)


MUTATIONS = ["negative_sigma", "nan_sigma", "reversed_interval", "nan_t", "negative_count", "offset", "total",
             "t_ends_length", "rgb_channels"]


@rejects_one_bad_argument(packed_case(), MUTATIONS)
def test_packed_volume_render_rejects_one_bad_argument(case, mutation):
    sigma, rgb, t0, t1, offsets, counts, bg, eps = case
    sigma, rgb, t0, t1, offsets, counts = (a.copy() for a in (sigma, rgb, t0, t1, offsets, counts))
    R, N = len(counts), len(sigma)
    needs_samples = mutation in ("negative_sigma", "nan_sigma", "reversed_interval", "nan_t", "t_ends_length")
    assume(not needs_samples or N > 0)
    assume(mutation not in ("negative_count", "offset", "total") or R > 0)
    if mutation == "negative_sigma":
        sigma[N - 1] = -1e-3
        names = ("sigma",)
    elif mutation == "nan_sigma":
        sigma[0] = np.nan
        names = ("sigma",)
    elif mutation == "reversed_interval":
        t1[N - 1] = t0[N - 1] - 1.0
        names = ("t_ends",)
    elif mutation == "nan_t":
        t1[0] = np.nan
        names = ("t_ends",)
    elif mutation == "negative_count":
        counts[R - 1] = -1
        names = ("ray_counts",)
    elif mutation == "offset":
        offsets[R - 1] += 1
        names = ("ray_offsets", "ray_counts")
    elif mutation == "total":
        counts[R - 1] += 1
        names = ("ray_counts",)
    elif mutation == "t_ends_length":
        t1 = t1[:-1]
        names = ("t_ends",)
    elif mutation == "rgb_channels":
        rgb = np.zeros((N, 4), sigma.dtype)
        names = ("rgb",)
    else:
        bg, eps, names = common_mutation(mutation, R, sigma.dtype, bg, eps)
    expect_rejected(lambda: metal_ops.packed_volume_render(sigma, rgb, t0, t1, offsets, counts, background=bg,
                                                           early_termination=eps), *names)
