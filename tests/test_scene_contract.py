"""SceneContract (mip-NeRF 360's contraction of unbounded scenes): the kernels
vs the NumPy reference (tests/reference/scene_contract.py) and the plain-TF
formula, gradients, shapes (empty ones too), dtypes, special values and bad
inputs, on every device."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.op_checks import assert_float_input_named, assert_static_shape
from tests.reference import scene_contract as ref

pytestmark = pytest.mark.every_device

NORMS = list(ref.NORMS)
DTYPES = [np.float32, np.float16]
SHAPES = [(1, 3), (7, 3), (1000, 3), (3,), (2, 5, 3), (4, 1, 6, 3)]
EMPTY = [(0, 3), (4, 0, 3), (0, 0, 3)]
# Inside, outside, on the boundaries of both norms, and far away.
SPECIAL = np.array([[0, 0, 0], [1, 0, 0], [0, -1, 0], [0.6, 0.8, 0], [1, 1, 1], [-1, 0.5, 0.25],
                    [2, 0, 0], [1e-30, 0, 0], [3e38, -3e38, 3e38], [1e20, 1, -1], [-7, 3, 2]])
NONFINITE = np.array([[np.inf, 0, 0], [-np.inf, np.inf, 5], [np.inf, np.inf, np.inf], [np.nan, 0, 0],
                      [0, np.nan, np.inf], [1, 2, np.nan]])


def points(shape, dtype=np.float32, seed=0):
    """Points inside and outside the unit ball (radii from 0.05 to ~1e4), with
    an upstream gradient of the same shape."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * np.exp(rng.uniform(-3, 9 if dtype == np.float32 else 6, size=shape[:-1] + (1,)))
    return x.astype(dtype), rng.uniform(-1, 1, size=shape).astype(dtype)


def op_with_grad(x, grad, norm):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = metal_ops.scene_contract(xt, norm=norm)
    return y.numpy(), tape.gradient(y, xt, output_gradients=tf.constant(grad)).numpy()


@tf.function
def _graph_op_with_grad(x, grad, norm):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = metal_ops.scene_contract(x, norm=norm)
    return y, tape.gradient(y, x, output_gradients=grad)


# ---- values and gradients ---------------------------------------------------------------
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + EMPTY)
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_values_and_gradient_match_numpy(norm, dtype, shape, mode):
    x, g = points(shape, dtype, seed=len(shape) + shape[0])
    if mode == "eager":
        y, dx = op_with_grad(x, g, norm)
    else:
        y, dx = (t.numpy() for t in _graph_op_with_grad(tf.constant(x), tf.constant(g), norm))
    assert y.shape == shape and dx.shape == shape and y.dtype == dtype and dx.dtype == dtype
    # The reference on the inputs as the kernel sees them (float16 rounded), in float64.
    ref.assert_like(y, ref.forward(x, norm), dtype)
    ref.assert_like(dx, ref.vjp(x, g, norm), dtype)
    assert np.all(np.abs(y) <= 2)


@pytest.mark.parametrize("norm", NORMS)
def test_special_points(norm):
    x = SPECIAL.astype(np.float32)
    g = np.random.default_rng(1).uniform(-1, 1, x.shape).astype(np.float32)
    y, dx = op_with_grad(x, g, norm)
    ref.assert_like(y, ref.forward(x, norm), np.float32)
    ref.assert_like(dx, ref.vjp(x, g, norm), np.float32)
    np.testing.assert_array_equal(y[:3], x[:3])  # inside and on the unit sphere: unchanged
    np.testing.assert_array_equal(dx[:3], g[:3])


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_infinite_points_go_to_the_boundary_and_nan_stays_nan(norm, dtype):
    x = NONFINITE.astype(dtype)
    g = np.ones_like(x)
    y, dx = op_with_grad(x, g, norm)
    want = ref.forward(x, norm)
    ref.assert_like(y, want, dtype)
    ref.assert_like(dx, ref.vjp(x, g, norm), dtype)
    np.testing.assert_allclose(np.linalg.norm(want[:3], ord=2 if norm == "l2" else np.inf, axis=-1), 2)
    assert np.isnan(y[3:]).all() and np.isnan(dx[3:]).all()


@pytest.mark.parametrize("norm", NORMS)
def test_matches_the_tf_formula(norm):
    x, g = points((2000, 3), seed=5)
    y, dx = op_with_grad(x, g, norm)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        want = ref.tf_composite(xt, norm)
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, tape.gradient(want, xt, output_gradients=tf.constant(g)).numpy(), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("norm", NORMS)
def test_compute_gradient(norm):
    # Away from the unit sphere and, for linf, from ties of the largest coordinate.
    x = np.array([[0.1, -0.3, 0.2], [2.0, 0.5, -0.7], [-0.4, 3.0, 1.0], [0.3, 1.2, -5.0], [40.0, -20.0, 10.0]],
                 np.float32)
    theoretical, numerical = tf.test.compute_gradient(lambda v: metal_ops.scene_contract(v, norm=norm), [x],
                                                      delta=1e-3)
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("norm", NORMS)
def test_gradient_is_continuous_at_the_unit_sphere(norm):
    u = np.array([[0.6, 0.8, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]], np.float32)
    g = np.array([[1.0, -2.0, 0.5]] * 3, np.float32)
    if norm == "linf":
        u = u / np.abs(u).max(-1, keepdims=True)
    _, inside = op_with_grad(u * np.float32(1 - 1e-4), g, norm)
    _, outside = op_with_grad(u * np.float32(1 + 1e-4), g, norm)
    np.testing.assert_allclose(inside, outside, atol=1e-3)


def test_python_data_is_float32_and_float16_stays_float16():
    assert metal_ops.scene_contract([[0.0, 2.0, 0.0]]).dtype == tf.float32
    assert metal_ops.scene_contract(np.float16([[0.0, 2.0, 0.0]])).dtype == tf.float16


def test_deterministic_across_calls():
    x, g = points((50_000, 3), seed=9)
    a = op_with_grad(x, g, "l2")
    b = op_with_grad(x, g, "l2")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


# ---- shapes --------------------------------------------------------------------------------
def test_shape_function():
    assert_static_shape(lambda x: metal_ops.scene_contract(x, norm="linf"), [None, 5, 3], [None, 5, 3])

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def g(x):
        return metal_ops.scene_contract(x)

    x, _ = points((4, 3))
    ref.assert_like(g(x).numpy(), ref.forward(x, "l2"), np.float32)


# ---- bad inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (4,), (5, 2), (2, 3, 4)])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_x_shape_names_x(shape, mode):
    fn = metal_ops.scene_contract if mode == "eager" else tf.function(metal_ops.scene_contract)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                       match=r"SceneContract: 'x' must be \[\.\.\., 3\]"):
        fn(np.zeros(shape, np.float32))


@pytest.mark.parametrize("norm", ["l1", "L2", "", "inf"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_norm_names_norm(norm, mode):
    fn = (lambda v: metal_ops.scene_contract(v, norm=norm))
    fn = fn if mode == "eager" else tf.function(fn)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'norm'"):
        fn(np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("norm", [2, None, b"l2"])
def test_non_string_norm_is_a_type_error(norm):
    with pytest.raises(TypeError, match="'norm' must be one of 'l2', 'linf'"):
        metal_ops.scene_contract(np.zeros((2, 3), np.float32), norm=norm)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64])
def test_wrong_dtype_names_x(dtype):
    assert_float_input_named(metal_ops.scene_contract, "x", dtype, (2, 3))


def test_grad_op_checks_its_inputs():
    lib = metal_ops.load_library()
    x = np.zeros((6, 3), np.float32)
    match = r"SceneContractGrad: 'grad' must have the shape of 'x' \[6,3\], got \[5,3\]"
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
        lib.metal_ops_scene_contract_grad(np.zeros((5, 3), np.float32), x)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="SceneContractGrad: 'grad' must have"):
        tf.function(lambda g, v: lib.metal_ops_scene_contract_grad(g, v), input_signature=[
            tf.TensorSpec(None, tf.float32), tf.TensorSpec(None, tf.float32)])(np.zeros((3, 3), np.float32),
                                                                                np.zeros((1, 9, 3), np.float32))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'x' must be"):
        lib.metal_ops_scene_contract_grad(np.zeros((6, 2), np.float32), np.zeros((6, 2), np.float32))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'norm'"):
        lib.metal_ops_scene_contract_grad(x, x, norm="l1")
