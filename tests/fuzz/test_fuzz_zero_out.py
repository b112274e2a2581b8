"""Fuzzing ZeroOut: random shapes (0-sized dims included), dtypes (allowed and
not), preserve_index in and out of range, special values; eager and graph."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import SPECIAL_F32, assert_names_argument, expect_rejected, fuzz_settings
from tests.reference import zero_out as reference

ALLOWED = [np.int32, np.int64, np.float32, np.float64]
NOT_ALLOWED = [np.uint8, np.int16, np.float16, np.bool_, np.complex64]


@st.composite
def zero_out_case(draw):
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=0, max_size=4)))
    if draw(st.integers(0, 9)) == 0:  # now and then one long axis
        shape = shape + (draw(st.integers(1000, 200_000)),)
    dtype = draw(st.sampled_from(ALLOWED))
    n = int(np.prod(shape)) if shape else 1
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if np.issubdtype(dtype, np.floating):
        x = rng.normal(size=shape).astype(dtype)
        if n and draw(st.booleans()):
            x.reshape(-1)[rng.integers(0, n, size=min(n, 5))] = rng.choice(np.asarray(SPECIAL_F32, dtype), size=min(n, 5))
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    preserve = draw(st.one_of(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0)),
                              st.integers(n, n + 3), st.sampled_from([2**31 - 1, 2**31, 2**40, 2**63 - 1])))
    return x, preserve


@fuzz_settings()
@given(case=zero_out_case(), graph=st.booleans())
def test_zero_out_fuzz(case, graph):
    x, preserve = case
    fn = tf.function(metal_ops.zero_out) if graph else metal_ops.zero_out
    if x.size and preserve >= x.size:
        e = expect_rejected(lambda: fn(x, preserve_index=preserve), "preserve_index",
                            errors=(tf.errors.InvalidArgumentError,))
        assert "to_zero" in str(e)
        return
    out = fn(x, preserve_index=preserve).numpy()
    assert out.dtype == x.dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, reference.zero_out(x, preserve))


@fuzz_settings(max_examples_fraction=0.5)
@given(preserve=st.integers(-(2**63), -1))
def test_zero_out_negative_index_fuzz(preserve):
    expect_rejected(lambda: metal_ops.zero_out(np.ones(3, np.float32), preserve_index=preserve), "preserve_index")


@pytest.mark.parametrize("dtype", NOT_ALLOWED, ids=lambda d: np.dtype(d).name)
def test_zero_out_rejects_dtypes_naming_input(dtype):
    # The dtype rule (README "Dtypes"): a TypeError naming the wrapper's argument.
    e = expect_rejected(lambda: metal_ops.zero_out(np.zeros(3, dtype)), "'x'")
    assert isinstance(e, TypeError)


@fuzz_settings(max_examples_fraction=0.5)
@given(rank=st.integers(0, 5), known=st.lists(st.booleans(), min_size=5, max_size=5), preserve=st.integers(0, 50))
def test_zero_out_shape_function_fuzz(rank, known, preserve):
    """Partially known shapes in a traced graph: the shape function must keep
    the input's static shape and never fail."""
    dims = [3 if known[i] else None for i in range(rank)]

    @tf.function(input_signature=[tf.TensorSpec(dims, tf.float32)])
    def f(x):
        y = metal_ops.zero_out(x, preserve_index=preserve)
        assert y.shape.as_list() == dims
        return y

    f.get_concrete_function()
