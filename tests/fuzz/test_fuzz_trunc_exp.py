"""Fuzzing TruncExp: random shapes (0-sized included), float32 / float16,
magnitudes up to 100 with NaN / +-inf / denormals / huge values sprinkled in;
values and gradients against the float64 NumPy reference
(tests/reference/trunc_exp.py), NaN / inf exactly where it has them; then a
wrong dtype, which must be rejected naming 'x'."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import expect_rejected, fast_arrays, flush_denormals, fuzz_settings, value_and_vjp
from tests.reference import trunc_exp as ref


@st.composite
def trunc_exp_case(draw):
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 5, 33]), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float16]))
    magnitude = draw(st.sampled_from([1.0, 16.0, 100.0] if dtype == np.float32 else [1.0, 12.0]))
    rate = draw(st.sampled_from([0.0, 0.05]))
    x = fast_arrays(draw, shape, -magnitude, magnitude, special_rate=rate)
    dy = fast_arrays(draw, shape, -2.0, 2.0, special_rate=rate)
    with np.errstate(over="ignore"):  # huge specials become float16's inf
        return x.astype(dtype), dy.astype(dtype)


def assert_like(got, want, dtype):
    """NaN / inf where the reference (rounded to dtype) has them; finite values
    within a few ulp, results below dtype's smallest normal within it (TF's
    CPU threads flush denormals to zero)."""
    with np.errstate(over="ignore"):
        want = want.astype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite].astype(np.float64), want[finite].astype(np.float64),
                               rtol=4e-6 if dtype == np.float32 else 2e-3, atol=np.finfo(dtype).tiny)


@fuzz_settings()
@given(case=trunc_exp_case(), graph=st.booleans())
def test_trunc_exp_matches_reference(case, graph):
    x, dy = case
    y, dx = value_and_vjp(metal_ops.trunc_exp, x, dy, graph)
    assert y.shape == x.shape and y.dtype == x.dtype and dx.shape == x.shape
    xf, dyf = flush_denormals(x), flush_denormals(dy)
    assert_like(y, ref.forward(xf), x.dtype)
    assert_like(dx, ref.grad(dyf, xf), x.dtype)


@fuzz_settings(max_examples_fraction=0.2)
@given(dtype=st.sampled_from([np.float64, np.int32, np.int64, np.complex64, np.bool_]))
def test_trunc_exp_rejects_other_dtypes(dtype):
    expect_rejected(lambda: metal_ops.trunc_exp(np.zeros((3,), dtype)), "x")
