"""Fuzzing RayMarch: random rays (axis-parallel and zero components, NaN /
+-inf / huge values sprinkled in), grids, cascades, steps and sample caps.
Every call must return a consistent packing (counts within the cap, offsets
their prefix sum, samples ordered and inside each ray's bounds); on finite
inputs the samples must equal the float64 reference's. Then one mutation at a
time of a valid call, which must be rejected naming the argument."""
import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import metal_ops
from tests.fuzz.strategies import expect_rejected, fast_arrays, flush_denormals, fuzz_settings
from tests.reference import ray_march as ref


@st.composite
def march_case(draw, special=True):
    rays = draw(st.sampled_from([0, 1, 3, 17, 64]))
    g = draw(st.sampled_from([1, 2, 3, 8, 16]))
    cascades = draw(st.integers(1, 3))
    rate = draw(st.sampled_from([0.0, 0.1])) if special else 0.0
    origins = fast_arrays(draw, (rays, 3), -3, 3, special_rate=rate)
    dirs = fast_arrays(draw, (rays, 3), -1, 1, special_rate=rate)
    if rays and draw(st.booleans()):  # axis-parallel rays
        dirs[:, draw(st.integers(0, 2))] = 0.0
    near = fast_arrays(draw, (rays,), 0, 1, special_rate=rate)
    far = fast_arrays(draw, (rays,), 1, 12, special_rate=rate)
    fill = draw(st.sampled_from([0.0, 0.3, 1.0]))
    occ = np.random.default_rng(draw(st.integers(0, 2**31))).uniform(size=(cascades, g, g, g)) < fill
    bits = np.packbits(occ.reshape(cascades, -1), axis=1, bitorder="little")
    attrs = dict(aabb=[-0.5, 0.0, -1.0, 1.0, 1.25, 0.5], grid_resolution=g,
                 step_size=draw(st.sampled_from([0.005, 0.05, 0.3])),
                 cone_angle=draw(st.sampled_from([0.0, 0.01, 0.5])), max_step_size=draw(st.sampled_from([0.3, 1e10])),
                 max_samples=draw(st.sampled_from([1, 5, 1024])), jitter=draw(st.booleans()),
                 seed=draw(st.integers(-2**31, 2**31 - 1)))
    return origins, dirs, near, far, bits, attrs


def check_packing(out, near, far, max_samples):
    ts, te, ri, off, cnt = [v.numpy() for v in out]
    assert np.all((cnt >= 0) & (cnt <= max_samples))
    np.testing.assert_array_equal(off, np.cumsum(cnt) - cnt)
    assert ts.shape == te.shape == ri.shape == (int(cnt.sum()),)
    np.testing.assert_array_equal(ri, np.repeat(np.arange(len(cnt)), cnt))
    assert np.all(np.isfinite(ts)) and np.all(np.isfinite(te)) and np.all(te >= ts)
    same = ri[1:] == ri[:-1]
    assert np.all(ts[1:][same] >= te[:-1][same])
    if len(ri):  # bounds as the kernel sees them (TF flushes denormals)
        near, far = flush_denormals(near), flush_denormals(far)
        assert np.all(ts >= near[ri]) and np.all(te <= far[ri])


@fuzz_settings()
@given(case=march_case(), graph=st.booleans())
def test_ray_march_packing_is_consistent(case, graph):
    origins, dirs, near, far, bits, attrs = case
    fn = lambda: metal_ops.ray_march(origins, dirs, near, far, bits, **attrs)  # noqa: E731
    out = tf.function(fn)() if graph else fn()
    check_packing(out, near, far, attrs["max_samples"])


@fuzz_settings(max_examples_fraction=0.5)
@given(case=march_case(special=False))
def test_ray_march_matches_reference(case):
    origins, dirs, near, far, bits, attrs = case
    got = [v.numpy() for v in metal_ops.ray_march(origins, dirs, near, far, bits, **attrs)]
    want = ref.reference(origins, dirs, near, far, bits, **attrs)
    for k in (2, 3, 4):
        np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


MUTATIONS = {
    "origins": lambda a: a.update(origins=np.zeros((2, 2), np.float32)),
    "directions": lambda a: a.update(directions=np.zeros((1, 3), np.float32)),
    "near": lambda a: a.update(near=np.zeros((2, 1), np.float32)),
    "far": lambda a: a.update(far=np.zeros(5, np.float32)),
    "occupancy": lambda a: a.update(occupancy=np.zeros((1, 3), np.uint8)),
    "aabb": lambda a: a.update(aabb=[0, 0, 0, 1, 1, np.nan]),
    "grid_resolution": lambda a: a.update(grid_resolution=-4),
    "step_size": lambda a: a.update(step_size=-1.0),
    "cone_angle": lambda a: a.update(cone_angle=float("inf")),
    "max_step_size": lambda a: a.update(max_step_size=1e-6),
    "max_samples": lambda a: a.update(max_samples=0),
}


@fuzz_settings(max_examples_fraction=0.5)
@given(mutation=st.sampled_from(sorted(MUTATIONS)), graph=st.booleans())
def test_ray_march_rejects_one_bad_argument(mutation, graph):
    args = dict(origins=np.zeros((2, 3), np.float32), directions=np.ones((2, 3), np.float32),
                near=np.zeros(2, np.float32), far=np.ones(2, np.float32), occupancy=np.zeros((1, 1), np.uint8),
                aabb=[0, 0, 0, 1, 1, 1], grid_resolution=2, step_size=0.1)
    MUTATIONS[mutation](args)
    fn = lambda: metal_ops.ray_march(**args)  # noqa: E731
    expect_rejected((lambda: tf.function(fn)()) if graph else fn, mutation)
