"""Fuzzing VolumeRender: random R, S (0 included), densities from 0 to huge
and +inf, zero-width and huge intervals, background None / [3] / [R, 3],
early_termination in [0, 1], float32 / float64; forward against
tests/reference/volume_render.py, then one mutation at a time of a valid call,
which must be rejected naming the argument."""
import numpy as np
import tensorflow as tf
from hypothesis import assume, given
from hypothesis import strategies as st

import metal_ops
from tests.reference import volume_render as ref
from tests.fuzz.render_checks import (assert_gradients_finite, assert_matches_reference, common_mutation,
                                      draw_common, rejects_one_bad_argument)
from tests.fuzz.strategies import expect_rejected, flush_denormals, fuzz_settings


@st.composite
def render_case(draw):
    R = draw(st.sampled_from([0, 1, 2, 5, 17]))
    S = draw(st.sampled_from([0, 1, 2, 3, 8, 33]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale, bg, eps, cast = draw_common(draw, rng, R)
    sigma = rng.uniform(0, scale, size=(R, S))
    if sigma.size and draw(st.booleans()):
        sigma.reshape(-1)[rng.integers(0, sigma.size, size=2)] = draw(st.sampled_from([0.0, 1e-45, 1e30]))
    steps = rng.uniform(0, draw(st.sampled_from([1e-3, 0.1, 1.0])), size=(R, S + 1))
    if steps.size and draw(st.booleans()):
        steps.reshape(-1)[rng.integers(0, steps.size, size=2)] = 0.0  # zero-width intervals
    t = np.cumsum(steps, axis=1) + draw(st.sampled_from([0.0, 2.0, 1e3]))
    rgb = rng.uniform(0, 1, size=(R, S, 3))
    return cast(sigma), cast(rgb), cast(t), cast(bg), eps


@fuzz_settings()
@given(case=render_case(), graph=st.booleans(), return_weights=st.booleans())
def test_volume_render_matches_reference(case, graph, return_weights):
    sigma, rgb, t, bg, eps = case
    ft = flush_denormals
    # Samples whose transmittance lies at the threshold may flip between the
    # float32 kernel and the float64 reference: compare away from it.
    assume(ref.margin_ok(ft(sigma), ft(t), eps, margin=1e-3 if sigma.dtype == np.float32 else 1e-9))
    fn = tf.function(metal_ops.volume_render) if graph else metal_ops.volume_render
    out = fn(sigma, rgb, t, background=bg, early_termination=eps, return_weights=return_weights)
    expected = ref.render(ft(sigma), ft(rgb), ft(t), None if bg is None else ft(bg), eps)
    R = sigma.shape[0]
    assert out.rgb.shape == (R, 3) and out.depth.shape == (R,) and out.opacity.shape == (R,)
    assert_matches_reference(out, expected, sigma.dtype, t, return_weights)


@fuzz_settings(max_examples_fraction=0.5)
@given(case=render_case())
def test_volume_render_gradients_are_finite(case):
    """Any valid input (densities up to 1e30, zero-width intervals) gives
    finite gradients for sigma, rgb and background."""
    sigma, rgb, t, bg, eps = case
    assert_gradients_finite(
        lambda s, c, b: metal_ops.volume_render(s, c, t, background=b, early_termination=eps, return_weights=True),
        sigma, rgb, bg, t)


MUTATIONS = ["negative_sigma", "nan_sigma", "decreasing_t", "nan_t", "t_columns", "rgb_channels", "rgb_rays",
             "sigma_rank", "background_shape"]


@rejects_one_bad_argument(render_case(), MUTATIONS)
def test_volume_render_rejects_one_bad_argument(case, mutation):
    sigma, rgb, t, bg, eps = case
    sigma, rgb, t = sigma.copy(), rgb.copy(), t.copy()
    R, S = sigma.shape
    needs_values = mutation in ("negative_sigma", "nan_sigma", "decreasing_t", "nan_t")
    assume(not needs_values or (R > 0 and S > 0))
    if mutation == "negative_sigma":
        sigma[R - 1, S - 1] = -1e-3
        names = ("sigma",)
    elif mutation == "nan_sigma":
        sigma[0, 0] = np.nan
        names = ("sigma",)
    elif mutation == "decreasing_t":
        t[R - 1, S] = t[R - 1, S - 1] - 1.0
        names = ("t",)
    elif mutation == "nan_t":
        t[0, S] = np.nan
        names = ("t",)
    elif mutation == "t_columns":
        t = t[:, :-1]
        names = ("t",)
    elif mutation == "rgb_channels":
        rgb = np.zeros((R, S, 4), sigma.dtype)
        names = ("rgb",)
    elif mutation == "rgb_rays":
        rgb = np.zeros((R + 1, S, 3), sigma.dtype)
        names = ("rgb",)
    elif mutation == "sigma_rank":
        sigma = sigma.reshape(-1)
        names = ("sigma",)
    elif mutation == "background_shape":
        bg = np.zeros((4,), sigma.dtype)
        names = ("background",)
    else:
        bg, eps, names = common_mutation(mutation, R, sigma.dtype, bg, eps)
    expect_rejected(lambda: metal_ops.volume_render(sigma, rgb, t, background=bg, early_termination=eps), *names)
