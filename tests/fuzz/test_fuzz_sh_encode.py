"""Fuzzing SHEncode: random leading shapes (0-sized included), degrees 1-4,
float32 / float16, magnitudes from 1e-6 to 1e6 with NaN / +-inf / denormals
sprinkled in; values against the float64 NumPy polynomials
(tests/reference/sh_encode.py), NaN / inf exactly where the float32 TF
composite gives them, gradients of finite
inputs against complex-step derivatives; then one mutation at a time of a
valid call, which must be rejected naming the argument."""
import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import (eager_or_graph, expect_rejected, fast_arrays, flush_denormals, fuzz_settings,
                                   mutated_vectors, value_and_vjp)
from tests.reference import sh_encode as ref


@st.composite
def sh_case(draw, special=True):
    lead = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 5, 33]), min_size=0, max_size=3)))
    degree = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float16]))
    magnitude = draw(st.sampled_from([1e-6, 1.0, 10.0, 1e6] if dtype == np.float32 else [1e-2, 1.0, 4.0]))
    rate = draw(st.sampled_from([0.0, 0.05])) if special and dtype == np.float32 else 0.0
    d = fast_arrays(draw, lead + (3,), -magnitude, magnitude, special_rate=rate)
    if rate:  # the huge finite specials would overflow float32 polynomials that float64 keeps finite
        d = np.where(np.isfinite(d) & (np.abs(d) > magnitude), np.float32(magnitude), d)
    return d.astype(dtype), degree


def tolerance(d, dtype, power):
    finite = np.abs(d[np.isfinite(d)]).astype(np.float64)
    scale = (finite.max(initial=0.0) + 1.0) ** power
    return (2e-6 if dtype == np.float32 else 4e-3) * scale


@fuzz_settings()
@given(case=sh_case(), graph=st.booleans())
def test_sh_encode_matches_reference(case, graph):
    """NaN / inf where the float32 TF composite gives them (the same float32
    rounding, products that underflow to 0 under TF's flush-to-zero included);
    finite values against the float64 polynomials."""
    d, degree = case
    out = eager_or_graph(lambda x: metal_ops.sh_encode(x, degree=degree), graph)(d).numpy()
    assert out.shape == d.shape[:-1] + (degree * degree,) and out.dtype == d.dtype
    composite = ref.tf_composite(tf.reshape(tf.cast(d, tf.float32), (-1, 3)), degree).numpy().reshape(out.shape)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(composite))
    np.testing.assert_array_equal(out[np.isinf(composite)], composite[np.isinf(composite)])
    with np.errstate(invalid="ignore", over="ignore"):
        expected = ref.values(flush_denormals(d), degree)
    finite = np.isfinite(expected) & np.isfinite(composite)
    np.testing.assert_allclose(out[finite].astype(np.float64), expected[finite], rtol=1e-5 if d.dtype == np.float32
                               else 4e-3, atol=tolerance(d, d.dtype, 3))


@fuzz_settings(max_examples_fraction=0.5)
@given(case=sh_case(special=False))
def test_sh_encode_gradient_matches_complex_step(case):
    d, degree = case
    rng = np.random.default_rng(d.size + degree)
    upstream = rng.uniform(-1, 1, size=d.shape[:-1] + (degree * degree,)).astype(d.dtype)
    _, g = value_and_vjp(lambda x: metal_ops.sh_encode(x, degree=degree), d, upstream)
    assert g.shape == d.shape and g.dtype == d.dtype
    expected = ref.vjp(flush_denormals(d), upstream, degree)
    np.testing.assert_allclose(g.astype(np.float64), expected, rtol=1e-5 if d.dtype == np.float32 else 4e-3,
                               atol=16 * tolerance(d, d.dtype, 2))


SH_MUTATIONS = ["last_dim", "scalar", "degree_low", "degree_high", "degree_float", "dirs_dtype"]


@fuzz_settings(max_examples_fraction=0.5)
@given(case=sh_case(special=False), mutation=st.sampled_from(SH_MUTATIONS), graph=st.booleans())
def test_sh_encode_rejects_one_bad_argument(case, mutation, graph):
    d, degree = case
    if mutation == "degree_low":
        degree = -degree + 1
    elif mutation == "degree_high":
        degree = degree + 4
    elif mutation == "degree_float":
        degree = float(degree)
    else:
        d = mutated_vectors(d, mutation, 4 if degree % 2 else 2)
    fn = eager_or_graph(lambda x: metal_ops.sh_encode(x, degree=degree), graph)
    expect_rejected(lambda: fn(d), "degree" if mutation.startswith("degree_") else "dirs")
