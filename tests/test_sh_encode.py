"""SHEncode (real spherical harmonics of directions): CPU kernels vs the NumPy
reference (tests/reference/sh_encode.py) and the TF composite it replaces,
gradients, shapes, dtypes and bad inputs. The Metal shaders:
tests/test_sh_encode_metal_shim.py; CUDA: tests/cuda/test_sh_encode_cuda.py."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.op_checks import assert_static_shape
from tests.reference import sh_encode as ref

pytestmark = pytest.mark.every_device

DEGREES = [1, 2, 3, 4]


def directions(n, seed=0, unit=True, shape=None):
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n, 3))
    if unit:
        d /= np.linalg.norm(d, axis=-1, keepdims=True)
    else:
        d *= rng.uniform(0.05, 3.0, size=(n, 1))
    d = d.astype(np.float32)
    return d.reshape(tuple(shape) + (3,)) if shape is not None else d


def op_with_grad(dirs, degree, upstream):
    d = tf.constant(dirs)
    with tf.GradientTape() as tape:
        tape.watch(d)
        y = metal_ops.sh_encode(d, degree=degree)
        total = tf.reduce_sum(y * tf.constant(upstream, y.dtype))
    return y.numpy(), tape.gradient(total, d).numpy()


# ---- values ------------------------------------------------------------------------------
def test_reference_is_the_textbook_real_spherical_harmonics():
    d = directions(500, seed=11).astype(np.float64)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)  # unit in float64 (the identity x2 + y2 + z2 = 1 is used)
    np.testing.assert_allclose(ref.values(d, 4), ref.legendre(d, 4), atol=1e-14)


@pytest.mark.parametrize("degree", DEGREES)
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("unit", [True, False])
def test_values_match_numpy(degree, mode, unit):
    d = directions(1000, seed=degree, unit=unit)
    fn = (lambda x: metal_ops.sh_encode(x, degree=degree))
    fn = fn if mode == "eager" else tf.function(fn)
    y = fn(d).numpy()
    assert y.shape == (1000, degree * degree) and y.dtype == np.float32
    want = ref.values(d, degree)
    scale = np.max(np.abs(d), axis=-1, keepdims=True) ** 3 + 1
    np.testing.assert_allclose(y / scale, want / scale, rtol=0, atol=1e-6)


@pytest.mark.parametrize("degree", DEGREES)
@pytest.mark.parametrize("unit", [True, False])
def test_matches_the_tf_composite(degree, unit):
    """The same polynomials as TF ops (tests/reference/sh_encode.py's tf_composite)."""
    d = directions(777, seed=20 + degree, unit=unit)
    y = metal_ops.sh_encode(d, degree=degree).numpy()
    np.testing.assert_allclose(y, ref.tf_composite(tf.constant(d), degree).numpy(), rtol=1e-6, atol=1e-6)


def test_non_unit_special_directions_behave_like_the_tf_composite():
    """No normalisation: zero, huge, tiny, inf and NaN directions give what the TF ops give."""
    d = np.array([[0, 0, 0], [1e3, -2e3, 5e2], [1e-20, 0, -1e-20], [0, 0, 2], [np.inf, 0, 0],
                  [np.nan, 0.5, 0.5], [1, -np.inf, 1], [3e12, 0, 0]], np.float32)
    y = metal_ops.sh_encode(d).numpy()
    want = ref.tf_composite(tf.constant(d)).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(y[finite], want[finite], rtol=1e-6, atol=1e-6)
    d = tf.constant(d[:4])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(d)
        ours = tf.reduce_sum(metal_ops.sh_encode(d) * np.linspace(-1, 1, 16, dtype=np.float32))
        theirs = tf.reduce_sum(ref.tf_composite(d) * np.linspace(-1, 1, 16, dtype=np.float32))
    np.testing.assert_allclose(tape.gradient(ours, d).numpy(), tape.gradient(theirs, d).numpy(), rtol=1e-5)


@pytest.mark.parametrize("degree", DEGREES)
def test_float16_is_computed_in_float32(degree):
    d = directions(300, seed=3).astype(np.float16)
    upstream = np.random.default_rng(4).uniform(-1, 1, size=(300, degree * degree)).astype(np.float16)
    y, g = op_with_grad(d, degree, upstream)
    assert y.dtype == np.float16 and g.dtype == np.float16
    assert metal_ops.sh_encode(d, degree=degree).dtype == tf.float16  # a NumPy float16 array stays float16
    assert metal_ops.sh_encode([[0.0, 0.0, 1.0]], degree=degree).dtype == tf.float32
    np.testing.assert_allclose(y.astype(np.float64), ref.values(d, degree), rtol=1e-3, atol=1e-3)
    want = ref.vjp(d, upstream, degree)
    np.testing.assert_allclose(g.astype(np.float64), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


# ---- gradients -----------------------------------------------------------------------------
@pytest.mark.parametrize("degree", DEGREES)
@pytest.mark.parametrize("unit", [True, False])
def test_gradient_matches_complex_step(degree, unit):
    d = directions(2000, seed=30 + degree, unit=unit)
    upstream = np.random.default_rng(5).normal(size=(2000, degree * degree)).astype(np.float32)
    _, g = op_with_grad(d, degree, upstream)
    want = ref.vjp(d, upstream, degree)
    scale = np.abs(upstream).sum(-1, keepdims=True) * (np.abs(d).max(-1, keepdims=True) ** 2 + 1)
    np.testing.assert_allclose(g / scale, want / scale, rtol=0, atol=2e-6)


@pytest.mark.parametrize("degree", DEGREES)
def test_compute_gradient(degree):
    d = directions(5, seed=degree, unit=False)
    theoretical, numerical = tf.test.compute_gradient(lambda x: metal_ops.sh_encode(x, degree=degree), [d],
                                                      delta=1e-3)
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-2, atol=2e-3)


def test_gradient_in_tf_function_with_extra_leading_dims():
    d = directions(70, shape=(2, 5, 7), seed=8)

    @tf.function
    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = metal_ops.sh_encode(x, degree=3)
            total = tf.reduce_sum(y * y)
        return y, tape.gradient(total, x)

    y, g = f(tf.constant(d))
    assert y.shape == (2, 5, 7, 9) and g.shape == (2, 5, 7, 3)
    flat = d.reshape(-1, 3)
    want_y = ref.values(flat, 3)
    np.testing.assert_allclose(y.numpy().reshape(-1, 9), want_y, atol=1e-6)
    np.testing.assert_allclose(g.numpy().reshape(-1, 3), ref.vjp(flat, 2 * want_y, 3), atol=1e-5)


# ---- shapes --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(0, 3), (3,), (1, 3), (4, 0, 3), (2, 3, 4, 3)])
@pytest.mark.parametrize("degree", [1, 4])
def test_shapes(shape, degree):
    d = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    upstream = np.ones(shape[:-1] + (degree * degree,), np.float32)
    y, g = op_with_grad(d, degree, upstream)
    assert y.shape == shape[:-1] + (degree * degree,) and g.shape == shape
    if d.size:
        np.testing.assert_allclose(y.reshape(-1, degree * degree), ref.values(d.reshape(-1, 3), degree), atol=1e-6)


def test_shape_function():
    assert_static_shape(lambda d: metal_ops.sh_encode(d, degree=3), [None, 5, 3], [None, 5, 9])

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def g(d):
        return metal_ops.sh_encode(d)

    np.testing.assert_allclose(g(directions(4)).numpy(), ref.values(directions(4), 4), atol=1e-6)


# ---- bad inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (4,), (5, 2), (2, 3, 4)])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_dirs_shape_names_dirs(shape, mode):
    d = np.zeros(shape, np.float32)
    fn = metal_ops.sh_encode if mode == "eager" else tf.function(metal_ops.sh_encode)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"SHEncode: 'dirs' must be \[\.\.\., 3\]"):
        fn(d)


@pytest.mark.parametrize("degree", [0, 5, -1, 100])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_degree_names_degree(degree, mode):
    fn = (lambda x: metal_ops.sh_encode(x, degree=degree))
    fn = fn if mode == "eager" else tf.function(fn)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'degree' must be 1, 2, 3 or 4"):
        fn(directions(3))


@pytest.mark.parametrize("degree", [2.0, "4", None, True])
def test_non_integer_degree_is_a_type_error(degree):
    with pytest.raises(TypeError, match="'degree'"):
        metal_ops.sh_encode(directions(3), degree=degree)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64])
def test_wrong_dtype_names_dirs(dtype):
    with pytest.raises(TypeError, match="'dirs' must be float32 or float16"):
        metal_ops.sh_encode(np.zeros((2, 3), dtype))
    with pytest.raises(TypeError, match="'dirs' must be float32 or float16"):
        metal_ops.sh_encode(np.full((2, 3), "a"))
    with pytest.raises(TypeError, match="'dirs'"):
        metal_ops.sh_encode(tf.zeros((2, 3), dtype))


def test_grad_op_checks_its_upstream_gradient():
    lib = metal_ops.load_library()
    d = directions(6)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="SHEncodeGrad: 'grad' must have"):
        lib.metal_ops_sh_encode_grad(np.zeros((6, 9), np.float32), d, degree=4)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="SHEncodeGrad: 'grad' must have"):
        lib.metal_ops_sh_encode_grad(np.zeros((5, 16), np.float32), d, degree=4)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'dirs'"):
        lib.metal_ops_sh_encode_grad(np.zeros((6, 16), np.float32), np.zeros((6, 2), np.float32), degree=4)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="'degree'"):
        lib.metal_ops_sh_encode_grad(np.zeros((6, 16), np.float32), d, degree=0)


def test_deterministic_across_calls():
    d = directions(50_000, seed=9, unit=False)
    upstream = np.random.default_rng(2).normal(size=(50_000, 16)).astype(np.float32)
    a = op_with_grad(d, 4, upstream)
    b = op_with_grad(d, 4, upstream)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
