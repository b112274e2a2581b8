"""What both renderers' fuzz tests share (test_fuzz_volume_render.py,
test_fuzz_packed_volume_render.py): the draws of the arguments they have in
common, outputs against the reference, finite gradients, the mutations of the
common arguments and the draws of the test that one bad argument is rejected."""
import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.strategies import fuzz_settings


def draw_common(draw, rng, R):
    """The draws every renderer's case makes: a dtype, a density scale, a
    background (None, one colour [3] or one per ray [R, 3], from `rng`),
    early_termination, and cast(array), the array in the dtype (None kept)."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    scale = draw(st.sampled_from([1e-3, 1.0, 50.0, 1e4]))
    background = draw(st.sampled_from(["none", "shared", "per_ray"]))
    bg = None if background == "none" else rng.uniform(0, 1, size=(3,) if background == "shared" else (R, 3))
    eps = draw(st.sampled_from([0.0, 1e-4, 0.01, 0.5, 1.0]))
    return scale, bg, eps, lambda a: None if a is None else np.asarray(a).astype(dtype)


# The mutations every renderer takes, after its own.
COMMON_MUTATIONS = ["background_rays", "early_termination"]


def rejects_one_bad_argument(case, mutations):
    """The settings and draws of a renderer's test that a valid call with one
    bad argument is rejected: test(case, mutation), the case drawn from `case`,
    the mutation from `mutations` and COMMON_MUTATIONS."""
    def apply(test):
        return fuzz_settings(max_examples_fraction=0.75)(
            given(case=case, mutation=st.sampled_from(mutations + COMMON_MUTATIONS))(test))
    return apply


def assert_matches_reference(out, expected, dtype, t, return_weights):
    """The op's outputs against the float64 reference's (rgb, depth, opacity,
    weights); depth's absolute error scales with the largest |t|."""
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(out.rgb.numpy(), expected[0], **tol)
    np.testing.assert_allclose(out.opacity.numpy(), expected[2], **tol)
    t_max = float(np.max(np.abs(t), initial=1.0))
    np.testing.assert_allclose(out.depth.numpy(), expected[1], rtol=tol["rtol"], atol=tol["atol"] * t_max)
    if return_weights:
        np.testing.assert_allclose(out.weights.numpy(), expected[3], **tol)


def assert_gradients_finite(render, sigma, rgb, bg, t):
    """render(sigma, rgb, background) with return_weights: the gradients of all
    its outputs (depth scaled by the largest |t|) for sigma, rgb and the
    background are there, shaped like them and finite."""
    vs = [tf.constant(sigma), tf.constant(rgb)] + ([] if bg is None else [tf.constant(bg)])
    with tf.GradientTape() as tape:
        tape.watch(vs)
        out = render(vs[0], vs[1], None if bg is None else vs[2])
        total = (tf.reduce_sum(out.rgb) + tf.reduce_sum(out.opacity) + tf.reduce_sum(out.weights) +
                 tf.reduce_sum(out.depth) / max(1.0, float(np.max(np.abs(t), initial=1.0))))
    for g, v in zip(tape.gradient(total, vs), vs):
        assert g is not None and g.shape == v.shape
        assert np.all(np.isfinite(g.numpy()))


def common_mutation(mutation, R, dtype, bg, eps):
    """One of COMMON_MUTATIONS: (background, early_termination, the argument
    names the error must give)."""
    if mutation == "background_rays":
        return np.zeros((R + 2, 3), dtype), eps, ("background",)
    assert mutation == "early_termination", mutation
    return bg, float(np.random.default_rng(R).choice([-0.5, 1.5, np.nan])), ("early_termination",)
