"""RayMarchStatic (`metal_ops.ray_march_static`): RayMarch into outputs of a
static size. Its kept samples and layout against the float64 reference of
RayMarch (tests/reference/ray_march.py) and against `ray_march` itself cut to
the budget by NumPy (whole rays in order while they fit), the padding, empty
batches and budgets, bad inputs, and the op under XLA
(`tf.function(jit_compile=True)`, docs/XLA.md): the same bits as without XLA,
compile-time errors with the kernel's messages."""
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference.ray_march import UNIT, grid_bits, random_case, reference
from tests.reference.ray_march_static import cut_to_budget

pytestmark = pytest.mark.cpu_semantics("MetalOpsRayMarchStatic has a CPU kernel and an XLA host handler only")

no_xla_on_macos = pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA: no XLA kernels on macOS")

ATTRS = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], step_size=0.0123, max_step_size=0.2)


def assert_equal_outputs(got, want):
    assert len(got) == len(want) == 7
    for name, g, w in zip(metal_ops.RayMarchStaticSamples._fields, got, want):
        g = np.asarray(g)
        assert g.shape == np.shape(w), name
        assert g.dtype == np.asarray(w).dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def case(seed, rays, g, cascades, fill):
    origins, dirs, near, far, bits = random_case(seed, rays, g, cascades, fill)
    return (origins, dirs, near, far, bits), dict(ATTRS, grid_resolution=g)


@pytest.mark.parametrize("g,cascades,fill,rays", [(8, 1, 0.3, 97), (5, 3, 0.6, 64), (16, 1, 0.05, 33)])
@pytest.mark.parametrize("cone_angle,jitter", [(0.0, False), (0.02, True)])
@pytest.mark.parametrize("budget_of_total", [0.0, 0.37, 0.999, 1.0, 1.5])
def test_kept_samples_are_ray_marchs_first_whole_rays(g, cascades, fill, rays, cone_angle, jitter, budget_of_total):
    inputs, kw = case(g * 10 + cascades, rays, g, cascades, fill)
    kw.update(cone_angle=cone_angle, jitter=jitter, seed=7)
    dynamic = [v.numpy() for v in metal_ops.ray_march(*inputs, **kw)]
    total = dynamic[0].shape[0]
    assert total > 0
    budget = int(round(total * budget_of_total))
    got = [v.numpy() for v in metal_ops.ray_march_static(*inputs, sample_budget=budget, **kw)]
    assert_equal_outputs(got, cut_to_budget(dynamic, rays, budget))
    # and the kept samples against the float64 reference of the march
    n, kept = int(got[5]), int(got[6])
    ref = reference(*inputs, **kw)
    np.testing.assert_array_equal(got[4][:kept], ref[4][:kept])
    np.testing.assert_allclose(got[0][:n], ref[0][:n], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1][:n], ref[1][:n], rtol=1e-5, atol=1e-5)
    if budget >= total:
        assert (n, kept) == (total, rays)


def test_a_ray_that_does_not_fit_stops_the_rays_after_it():
    # Three rays across a full grid with 8, 8 and 8 samples; the budget holds
    # 12: ray 0 is kept, ray 1 does not fit, ray 2 (which would fit alone in
    # the 4 left) gets nothing either.
    bits = grid_bits(np.ones((1, 4, 4, 4)), 4)
    origins = np.array([[-1.0, 0.3, 0.3], [-1.0, 0.6, 0.3], [-1.0, 0.3, 0.6]], np.float32)
    dirs = np.tile(np.array([[1.0, 0.0, 0.0]], np.float32), (3, 1))
    out = metal_ops.ray_march_static(origins, dirs, np.zeros(3, np.float32), np.full(3, 10.0, np.float32), bits,
                                     aabb=UNIT, grid_resolution=4, step_size=0.125, sample_budget=12)
    np.testing.assert_array_equal(out.ray_counts, [8, 0, 0])
    np.testing.assert_array_equal(out.ray_offsets, [0, 8, 8])
    assert (int(out.num_samples), int(out.num_rays)) == (8, 1)
    np.testing.assert_array_equal(out.t_starts[:8], 1.0 + 0.125 * np.arange(8))
    np.testing.assert_array_equal(out.t_starts[8:], np.zeros(4))
    np.testing.assert_array_equal(out.t_ends[8:], np.zeros(4))
    np.testing.assert_array_equal(out.ray_indices, [0] * 8 + [2] * 4)


@pytest.mark.parametrize("rays,budget", [(0, 0), (0, 5), (4, 0), (4, 3)])
def test_empty_batches_and_budgets(rays, budget):
    inputs, kw = case(5, max(rays, 1), 4, 1, 1.0)
    inputs = tuple(x[:rays] for x in inputs[:4]) + (inputs[4],)
    out = [v.numpy() for v in metal_ops.ray_march_static(*inputs, sample_budget=budget, **kw)]
    dynamic = [v.numpy() for v in metal_ops.ray_march(*inputs, **kw)]
    assert_equal_outputs(out, cut_to_budget(dynamic, rays, budget))
    assert [v.shape for v in out] == [(budget,)] * 3 + [(rays,)] * 2 + [()] * 2


def test_static_shapes_in_a_graph():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)] * 2 + [tf.TensorSpec([None], tf.float32)] * 2
                 + [tf.TensorSpec([1, 8], tf.uint8)])
    def f(o, d, n, fa, occ):
        out = metal_ops.ray_march_static(o, d, n, fa, occ, aabb=UNIT, grid_resolution=4, step_size=0.1,
                                         sample_budget=100)
        assert [v.shape.as_list() for v in out] == [[100]] * 3 + [[None]] * 2 + [[]] * 2
        return out

    f.get_concrete_function()


def test_no_gradient_flows_through_the_samples():
    inputs, kw = case(3, 16, 4, 1, 0.5)
    origins = tf.constant(inputs[0])
    with tf.GradientTape() as tape:
        tape.watch(origins)
        out = metal_ops.ray_march_static(origins, *inputs[1:], sample_budget=64, **kw)
        loss = tf.reduce_sum(out.t_starts)
    assert tape.gradient(loss, origins) is None


GOOD = dict(origins=np.zeros((2, 3), np.float32), directions=np.ones((2, 3), np.float32),
            near=np.zeros(2, np.float32), far=np.ones(2, np.float32), occupancy=np.zeros((1, 8), np.uint8))

BAD = [
    (dict(sample_budget=-1), "'sample_budget' must be in \\[0, 2147483647\\], got -1"),
    (dict(origins=np.zeros((2, 4), np.float32)), "'origins' must be \\[R, 3\\]"),
    (dict(near=np.zeros(3, np.float32)), "'near' must be \\[R\\] = \\[2\\]"),
    (dict(occupancy=np.zeros((1, 9), np.uint8)), "'occupancy' must be a uint8 bitfield \\[C, ceil\\(G\\^3 / 8\\)\\]"),
    (dict(grid_resolution=0), "'grid_resolution' must be in"),
    (dict(step_size=float("nan")), "'step_size' must be finite and > 0"),
    (dict(max_samples=0), "'max_samples' must be >= 1"),
]


def bad_args(change):
    args = dict(GOOD, aabb=UNIT, grid_resolution=4, step_size=0.1, sample_budget=8)
    args.update(change)
    return args


@pytest.mark.parametrize("change,message", BAD)
@pytest.mark.parametrize("mode", ["eager", "function", pytest.param("xla", marks=no_xla_on_macos)])
def test_bad_inputs(change, message, mode):
    args = bad_args(change)
    if mode == "eager":
        fn = lambda: metal_ops.ray_march_static(**args)  # noqa: E731
    else:
        fn = tf.function(lambda: metal_ops.ray_march_static(**args), jit_compile=mode == "xla")
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        fn()


@no_xla_on_macos
@pytest.mark.parametrize("change,message", [b for b in BAD if set(b[0]) <= set(GOOD)])
def test_xla_kernel_checks_shapes_unknown_to_the_shape_function(change, message):
    # Traced with unknown sizes: the shape function passes, the XLA kernel's
    # checks on the static shapes refuse the input while XLA compiles.
    args = bad_args(change)
    tensors = [tf.constant(args.pop(k)) for k in ("origins", "directions", "near", "far", "occupancy")]
    signature = [tf.TensorSpec([None] * t.shape.rank, t.dtype) for t in tensors]
    f = tf.function(lambda *t: metal_ops.ray_march_static(*t, **args), jit_compile=True, input_signature=signature)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        f(*tensors)


@pytest.mark.parametrize("arg,value", [("origins", np.zeros((2, 3), np.float64)), ("occupancy", np.zeros((1, 8)))])
def test_wrong_dtypes_are_type_errors(arg, value):
    with pytest.raises(TypeError, match=f"'{arg}' must be"):
        metal_ops.ray_march_static(**bad_args({arg: value}))


# ---- under XLA -------------------------------------------------------------------------
@no_xla_on_macos
@pytest.mark.parametrize("g,cascades,fill,rays", [(8, 1, 0.3, 97), (5, 3, 0.6, 64), (4, 1, 1.0, 0)])
@pytest.mark.parametrize("budget", [0, 50, 4000])
@pytest.mark.parametrize("jitter", [False, True])
def test_under_xla_same_bits_as_without(g, cascades, fill, rays, budget, jitter):
    inputs, kw = case(g + cascades, max(rays, 1), g, cascades, fill)
    inputs = tuple(x[:rays] for x in inputs[:4]) + (inputs[4],)
    kw.update(jitter=jitter, cone_angle=0.01)

    def march(seed, *xs):
        return tuple(metal_ops.ray_march_static(*xs, sample_budget=budget, seed=seed, **kw))

    seed = tf.constant(11)
    xla = tf.function(march, jit_compile=True)(seed, *inputs)
    plain = march(seed, *inputs)
    dynamic = [v.numpy() for v in metal_ops.ray_march(*inputs, seed=11, **kw)]
    assert_equal_outputs(xla, [v.numpy() for v in plain])
    assert_equal_outputs(xla, cut_to_budget(dynamic, rays, budget))


@no_xla_on_macos
def test_under_xla_the_seed_is_an_input():
    inputs, kw = case(2, 40, 8, 1, 0.5)
    f = tf.function(lambda s: metal_ops.ray_march_static(*inputs, sample_budget=500, jitter=True, seed=s, **kw),
                    jit_compile=True)
    a, b = f(tf.constant(1)), f(tf.constant(2))
    assert f.experimental_get_tracing_count() == 1
    for s, out in ((1, a), (2, b)):
        want = metal_ops.ray_march_static(*inputs, sample_budget=500, jitter=True, seed=s, **kw)
        assert_equal_outputs([v.numpy() for v in out], [v.numpy() for v in want])
    assert not np.array_equal(a.t_starts.numpy(), b.t_starts.numpy())
