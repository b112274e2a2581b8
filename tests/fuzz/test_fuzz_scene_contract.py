"""Fuzzing SceneContract: random leading shapes (0-sized included), both
norms, float32 / float16, magnitudes from 1e-6 to 1e30 with NaN / +-inf /
denormals / huge values sprinkled in; values against the float64 NumPy
formula (tests/reference/scene_contract.py), NaN exactly where it has them,
every coordinate in [-2, 2]; gradients of finite inputs against its
complex-step derivatives; then one mutation at a time of a valid call, which
must be rejected naming the argument."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import (eager_or_graph, expect_rejected, fast_arrays, flush_denormals, fuzz_settings,
                                   mutated_vectors, value_and_vjp)
from tests.reference import scene_contract as ref


@st.composite
def contract_case(draw, special=True):
    lead = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 5, 33]), min_size=0, max_size=3)))
    norm = draw(st.sampled_from(ref.NORMS))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float16]))
    magnitude = draw(st.sampled_from([1e-6, 1.0, 3.0, 1e6, 1e30] if dtype == np.float32 else [1e-2, 1.0, 3.0, 1e4]))
    rate = draw(st.sampled_from([0.0, 0.05])) if special and dtype == np.float32 else 0.0
    x = fast_arrays(draw, lead + (3,), -magnitude, magnitude, special_rate=rate)
    return x.astype(dtype), norm


@fuzz_settings()
@given(case=contract_case(), graph=st.booleans())
def test_scene_contract_matches_reference(case, graph):
    x, norm = case
    y = eager_or_graph(lambda v: metal_ops.scene_contract(v, norm=norm), graph)(x).numpy()
    assert y.shape == x.shape and y.dtype == x.dtype
    ref.assert_like(y, ref.forward(flush_denormals(x), norm), x.dtype.type)
    assert np.all(np.abs(y[~np.isnan(y)]) <= 2)


@fuzz_settings(max_examples_fraction=0.5)
@given(case=contract_case(special=False))
def test_scene_contract_gradient_matches_complex_step(case):
    x, norm = case
    upstream = np.random.default_rng(x.size).uniform(-1, 1, size=x.shape).astype(x.dtype)
    _, g = value_and_vjp(lambda v: metal_ops.scene_contract(v, norm=norm), x, upstream)
    assert g.shape == x.shape and g.dtype == x.dtype
    ref.assert_like(g, ref.vjp(flush_denormals(x), upstream, norm), x.dtype.type)


MUTATIONS = ["last_dim", "scalar", "norm_name", "norm_type", "x_dtype"]


@fuzz_settings(max_examples_fraction=0.5)
@given(case=contract_case(special=False), mutation=st.sampled_from(MUTATIONS), graph=st.booleans())
def test_scene_contract_rejects_one_bad_argument(case, mutation, graph):
    x, norm = case
    if mutation == "norm_name":
        norm = norm.upper() if norm == "l2" else "l1"
    elif mutation == "norm_type":
        norm = 2
    else:
        x = mutated_vectors(x, mutation, 2 if norm == "l2" else 4)
    fn = eager_or_graph(lambda v: metal_ops.scene_contract(v, norm=norm), graph)
    expect_rejected(lambda: fn(x), "norm" if mutation.startswith("norm_") else "x")
