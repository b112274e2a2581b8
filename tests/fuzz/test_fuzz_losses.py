"""Fuzzing RobustLoss and DistortionLoss.

RobustLoss: residuals over many magnitudes (and NaN / +-inf / denormals),
alpha anywhere in [-inf, inf] (scalar or per channel), scale from 1e-3 to 1e3;
values against a float64 NumPy form of Barron's formula written here
(expm1/log1p, no cancellation), gradients finite wherever the loss is.
DistortionLoss: random weights and non-decreasing t (zero-width intervals
included) against the O(S^2) double sum of the definition.
Then one mutation at a time of a valid call, rejected naming the argument."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import assume, given
from hypothesis import strategies as st

import metal_ops
from tests.reference import robust_loss as ref
from tests.fuzz.strategies import expect_rejected, flush_denormals, fuzz_settings

INF = float("inf")


@st.composite
def robust_case(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    channels = shape[-1] if shape else 1
    per_channel = bool(shape) and draw(st.booleans())
    alpha_values = st.one_of(st.sampled_from([2.0, 1.0, 0.0, -2.0, INF, -INF, 1e-6, -1e-6, 2 + 1e-6, 1e6, -1e6]),
                             st.floats(-20, 20, allow_nan=False))
    n_param = channels if per_channel else 1
    alpha = np.asarray(draw(st.lists(alpha_values, min_size=n_param, max_size=n_param)), np.float32)
    scale = np.asarray(draw(st.lists(st.floats(1e-3, 1e3), min_size=n_param, max_size=n_param)), np.float32)
    if not per_channel:
        alpha, scale = alpha[0], scale[0]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    magnitude = draw(st.sampled_from([1e-6, 1e-2, 1.0, 1e2, 1e6]))
    x = (rng.normal(size=shape) * magnitude).astype(np.float32)
    return x, alpha, scale


@fuzz_settings()
@given(case=robust_case(), graph=st.booleans())
def test_robust_loss_matches_reference(case, graph):
    x, alpha, scale = case
    fn = tf.function(metal_ops.robust_loss) if graph else metal_ops.robust_loss
    out = fn(x, alpha, scale).numpy()
    assert out.shape == x.shape and out.dtype == np.float32
    # docs/ROBUST_LOSS.md: rho saturates at exp(69) ~ 9.25e29 in every branch.
    expected = ref.rho_saturated(flush_denormals(x), alpha, scale)
    finite = np.isfinite(expected)
    np.testing.assert_allclose(out[finite], expected[finite], rtol=2e-4, atol=1e-6)
    # Where float64 overflows float32 the op may give inf, never NaN.
    assert not np.isnan(out[~finite]).any()


@fuzz_settings(max_examples_fraction=0.5)
@given(case=robust_case())
def test_robust_loss_gradients_finite_where_loss_is(case):
    x, alpha, scale = case
    xs, al, sc = tf.constant(x), tf.constant(alpha), tf.constant(scale)
    with tf.GradientTape() as tape:
        tape.watch([xs, al, sc])
        y = metal_ops.robust_loss(xs, al, sc)
    gx, ga, gs = tape.gradient(y, [xs, al, sc])
    y = y.numpy()
    assume(np.all(np.isfinite(y)) and np.all(np.abs(y) < 1e30))
    assert np.all(np.isfinite(gx.numpy())), "d rho / dx"
    assert np.all(np.isfinite(gs.numpy())), "d rho / d scale"
    assert not np.any(np.isnan(ga.numpy())), "d rho / d alpha"


@fuzz_settings(max_examples_fraction=0.5)
@given(x=st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 1e-45, -0.0, 3.4e38]), min_size=1, max_size=6),
       alpha=st.sampled_from([2.0, 1.0, 0.0, -2.0, INF, -INF, 0.5, 4.0]), scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_robust_loss_special_residuals_never_crash(x, alpha, scale):
    """Special residuals: a result of x's shape; NaN in, NaN (or a bounded
    value for bounded losses) out, never an error or a crash."""
    x = np.asarray(x, np.float32)
    xs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = metal_ops.robust_loss(xs, alpha, scale)
    g = tape.gradient(y, xs)
    assert y.shape == x.shape and g.shape == x.shape
    y = y.numpy()
    # A finite residual never gives NaN (even when x / scale overflows float32).
    assert not np.isnan(y[np.isfinite(x)]).any(), "finite residual -> non-NaN loss"


# x / scale = +-inf in float32 gives the limit, not NaN, for alpha in (-inf, 0]
# (robust_loss.h; docs/RELIABILITY.md).
@pytest.mark.parametrize("x,alpha,scale,expected", [
    (np.inf, -2.0, 1.0, 2.0),
    (np.inf, -5.0, 1.0, 1.4),
    (3.4e38, -2.0, 1e-3, 2.0),
    (3.4e38, 0.0, 1e-3, float(np.log(0.5) + 2 * np.log(3.4e41))),
])
def test_robust_loss_overflowing_ratio(x, alpha, scale, expected):
    y = metal_ops.robust_loss(np.asarray([x], np.float32), alpha, scale).numpy()
    np.testing.assert_allclose(y, [min(expected, np.exp(69.0))], rtol=1e-5)


ROBUST_MUTATIONS = ["scale_zero", "scale_negative", "scale_nan", "scale_inf", "alpha_nan", "alpha_channels",
                    "scale_channels", "x_dtype"]


@fuzz_settings(max_examples_fraction=0.5)
@given(case=robust_case(), mutation=st.sampled_from(ROBUST_MUTATIONS), tensor=st.booleans())
def test_robust_loss_rejects_one_bad_argument(case, mutation, tensor):
    x, alpha, scale = case
    alpha, scale = np.array(alpha, np.float32), np.array(scale, np.float32)
    if mutation in ("scale_zero", "scale_negative", "scale_nan", "scale_inf", "alpha_nan"):
        assume(scale.size > 0)  # per-channel parameters of a 0-channel x hold no value to spoil
    if mutation.startswith("scale_") and mutation != "scale_channels":
        scale = np.full_like(scale, {"scale_zero": 0.0, "scale_negative": -1.0, "scale_nan": np.nan,
                                     "scale_inf": np.inf}[mutation])
        names = ("scale",)
    elif mutation == "alpha_nan":
        alpha = np.full_like(alpha, np.nan)
        names = ("alpha",)
    elif mutation == "alpha_channels":
        alpha = np.zeros((x.shape[-1] + 2 if x.ndim else 2,), np.float32)  # never size 1 (that broadcasts)
        names = ("alpha",)
    elif mutation == "scale_channels":
        scale = np.ones((x.shape[-1] + 2 if x.ndim else 3,), np.float32)
        names = ("scale",)
    else:
        x = x.astype(np.float64)
        names = ("x",)
    if tensor:  # as tensors: checked by the CPU kernel instead of the wrapper
        alpha, scale = tf.constant(alpha), tf.constant(scale)
    expect_rejected(lambda: metal_ops.robust_loss(x, alpha, scale), *names)


def distortion_reference(w, t):
    """The definition: sum_ij w_i w_j |m_i - m_j| + 1/3 sum_i w_i^2 d_i (float64)."""
    w = np.asarray(w, np.float64)
    t = np.asarray(t, np.float64)
    m = 0.5 * (t[:, 1:] + t[:, :-1])
    d = t[:, 1:] - t[:, :-1]
    pair = np.abs(m[:, :, None] - m[:, None, :])
    return np.einsum("ri,rj,rij->r", w, w, pair) + np.sum(w * w * d, axis=1) / 3.0


@st.composite
def distortion_case(draw):
    R = draw(st.sampled_from([0, 1, 3, 16]))
    S = draw(st.sampled_from([0, 1, 2, 7, 64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = rng.uniform(0, 1, size=(R, S))
    if draw(st.booleans()):
        w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-12)
    steps = rng.uniform(0, draw(st.sampled_from([1e-3, 0.1, 1.0])), size=(R, S + 1))
    if steps.size and draw(st.booleans()):
        steps.reshape(-1)[rng.integers(0, steps.size, size=3)] = 0.0
    t = np.cumsum(steps, axis=1) + draw(st.sampled_from([0.0, 2.0, 100.0]))
    return w.astype(np.float32), t.astype(np.float32)


@fuzz_settings()
@given(case=distortion_case(), graph=st.booleans())
def test_distortion_loss_matches_definition(case, graph):
    w, t = case
    fn = tf.function(metal_ops.distortion_loss) if graph else metal_ops.distortion_loss
    out = fn(w, t).numpy()
    assert out.shape == (w.shape[0],)
    expected = distortion_reference(w, t)
    # Prefix sums of m * w cancel: the error grows with t's offset.
    scale = float(np.max(np.abs(t), initial=1.0)) * float(np.max(np.sum(w, axis=1) ** 2, initial=1.0))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-6 * scale)


@fuzz_settings(max_examples_fraction=0.5)
@given(case=distortion_case())
def test_distortion_loss_gradient_of_weights_matches_definition(case):
    """d loss / d w_k = 2 sum_j w_j |m_k - m_j| + 2/3 w_k d_k (from the definition)."""
    w, t = case
    ws = tf.constant(w)
    with tf.GradientTape() as tape:
        tape.watch(ws)
        y = metal_ops.distortion_loss(ws, t)
    g = tape.gradient(y, ws).numpy()
    t64, w64 = t.astype(np.float64), w.astype(np.float64)
    m = 0.5 * (t64[:, 1:] + t64[:, :-1])
    d = t64[:, 1:] - t64[:, :-1]
    expected = 2 * np.einsum("rj,rkj->rk", w64, np.abs(m[:, :, None] - m[:, None, :])) + 2.0 / 3.0 * w64 * d
    scale = float(np.max(np.abs(t), initial=1.0)) * float(np.max(np.sum(w, axis=1), initial=1.0))
    np.testing.assert_allclose(g, expected, rtol=1e-4, atol=2e-6 * scale)


DISTORTION_MUTATIONS = ["decreasing_t", "nan_t", "t_columns", "t_rows", "weights_rank", "t_rank", "weights_dtype"]


@fuzz_settings(max_examples_fraction=0.5)
@given(case=distortion_case(), mutation=st.sampled_from(DISTORTION_MUTATIONS))
def test_distortion_loss_rejects_one_bad_argument(case, mutation):
    w, t = case
    t = t.copy()
    R, S = w.shape
    if mutation in ("decreasing_t", "nan_t"):
        assume(R > 0 and S > 0)  # with S = 0 there is no interval (the loss is 0 whatever t holds)
        t[R - 1, S] = t[R - 1, S - 1] - 1.0 if mutation == "decreasing_t" else np.nan
        names = ("t",)
    elif mutation == "t_columns":
        t = np.zeros((R, S), np.float32)
        names = ("t",)
    elif mutation == "t_rows":
        t = np.zeros((R + 1, S + 1), np.float32)
        names = ("t",)
    elif mutation == "weights_rank":
        w = w.reshape(-1)
        names = ("weights",)
    elif mutation == "t_rank":
        t = t[None]
        names = ("t",)
    else:
        w = w.astype(np.float64)
        names = ("weights",)
    expect_rejected(lambda: metal_ops.distortion_loss(w, t), *names)
