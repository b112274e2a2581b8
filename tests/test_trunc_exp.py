"""TruncExp (y = exp(x), gradient dy * exp(clip(x, -15, 15))): the kernels vs
the NumPy reference (tests/reference/trunc_exp.py) on every device, the
gradient, shapes (empty ones too), dtypes, bad inputs, special values, and the
Metal shaders through the MSL shim. CUDA: tests/cuda/test_trunc_exp_cuda.py."""
import ctypes

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.metal_shim.shim import DTYPE_CODES, load_shim_functions, ptr
from tests.op_checks import assert_float_input_named
from tests.reference import trunc_exp as ref

pytestmark = pytest.mark.every_device

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 15.0, -15.0, 16.0, -16.0, 88.0, 89.0, -104.0, -110.0])


def inputs(shape, dtype, seed=0, lo=-20.0, hi=20.0):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=shape).astype(dtype), rng.uniform(-2, 2, size=shape).astype(dtype)


def op_with_grad(x, dy):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = metal_ops.trunc_exp(xt)
    return y.numpy(), tape.gradient(y, xt, output_gradients=tf.constant(dy)).numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (33, 17), (2, 3, 4, 5), ()])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_values_and_gradient_match_numpy(dtype, shape, mode):
    lo, hi = (-20.0, 20.0) if dtype == np.float32 else (-10.0, 10.0)  # float16: exp(x) below its max
    x, dy = inputs(shape, dtype, seed=len(shape), lo=lo, hi=hi)
    y, dx = op_with_grad(x, dy) if mode == "eager" else op_with_grad_fn(x, dy)
    assert y.shape == shape and y.dtype == dtype and dx.shape == shape and dx.dtype == dtype
    ref.assert_like(y, ref.forward(x), dtype)
    ref.assert_like(dx, ref.grad(dy, x), dtype)


@tf.function
def _graph_op_with_grad(x, dy):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = metal_ops.trunc_exp(x)
    return y, tape.gradient(y, x, output_gradients=dy)


def op_with_grad_fn(x, dy):
    y, dx = _graph_op_with_grad(tf.constant(x), tf.constant(dy))
    return y.numpy(), dx.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_special_values_like_the_reference(dtype):
    x = SPECIAL.astype(dtype)
    dy = np.resize(np.array([1.0, 0.0, -2.0, np.inf, np.nan, 0.5], dtype), x.shape)
    y, dx = op_with_grad(x, dy)
    ref.assert_like(y, ref.forward(x), dtype)
    ref.assert_like(dx, ref.grad(dy, x), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_special_values_among_ordinary_ones(dtype):
    """The CPU kernel computes a SIMD vector of elements at a time where all of
    its x allow it: special values spread through ordinary ones, with NaN and
    inf cotangents, put some vectors on the scalar formula and leave the others."""
    rng = np.random.default_rng(3)
    x, dy = inputs((517,), dtype, seed=3)
    x[rng.choice(x.size, SPECIAL.size, replace=False)] = SPECIAL.astype(dtype)
    dy[[40, 41, 300]] = [np.nan, np.inf, -np.inf]
    y, dx = op_with_grad(x, dy)
    ref.assert_like(y, ref.forward(x), dtype)
    ref.assert_like(dx, ref.grad(dy, x), dtype)


def test_gradient_clamps_at_exp_15():
    x = np.array([-40.0, -15.5, 15.5, 40.0], np.float32)
    _, dx = op_with_grad(x, np.ones_like(x))
    np.testing.assert_allclose(dx, np.exp(np.float32([-15, -15, 15, 15])), rtol=2e-6)


def test_compute_gradient():
    x = np.linspace(-3.0, 3.0, 13).astype(np.float32)
    theoretical, numerical = tf.test.compute_gradient(metal_ops.trunc_exp, [x], delta=1e-3)
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-2, atol=1e-3)


def test_matches_the_custom_gradient_composite():
    x, dy = inputs((500,), np.float32, seed=3)
    y, dx = op_with_grad(x, dy)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        want = ref.tf_composite(xt)
    np.testing.assert_allclose(y, want.numpy(), rtol=2e-6)
    np.testing.assert_allclose(dx, tape.gradient(want, xt, output_gradients=tf.constant(dy)).numpy(), rtol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (4, 0, 2)])
def test_empty(dtype, shape):
    y, dx = op_with_grad(np.zeros(shape, dtype), np.zeros(shape, dtype))
    assert y.shape == shape and dx.shape == shape and y.dtype == dtype


def test_python_data_is_float32():
    assert metal_ops.trunc_exp([0.0, 1.0]).dtype == tf.float32
    assert metal_ops.trunc_exp(np.float16([0.0])).dtype == tf.float16


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64])
def test_wrong_dtype_names_x(dtype):
    assert_float_input_named(metal_ops.trunc_exp, "x", dtype, (2, 3))


def test_grad_op_checks_its_upstream_gradient():
    lib = metal_ops.load_library()
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="TruncExpGrad: 'dy' has shape"):
        lib.metal_ops_trunc_exp_grad(np.zeros((5,), np.float32), np.zeros((6,), np.float32))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="TruncExpGrad: 'dy' has shape"):
        tf.function(lambda dy, x: lib.metal_ops_trunc_exp_grad(dy, x), input_signature=[
            tf.TensorSpec(None, tf.float32), tf.TensorSpec(None, tf.float32)])(np.zeros((2, 3), np.float32),
                                                                                np.zeros((3, 2), np.float32))


# ---- the Metal shaders, through the MSL shim ---------------------------------------------------

@pytest.fixture(scope="module")
def shim():
    i32, i64, u32, vp = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_void_p
    return load_shim_functions({"shim_trunc_exp_forward": [i32, vp, vp, i64, u32],
                                "shim_trunc_exp_backward": [i32, vp, vp, vp, i64, u32]})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n,grid", [(1, 1), (37, 8), (1000, 256), (300, 4096), (0, 16), (len(SPECIAL), 4)])
def test_shaders_match_numpy(shim, dtype, n, grid):
    if n == len(SPECIAL):
        x = SPECIAL.astype(dtype)
        dy = np.resize(np.array([1.0, 0.0, -2.0, np.inf, np.nan, 0.5], dtype), n)
    else:
        x, dy = inputs((n,), dtype, seed=n, hi=20.0 if dtype == np.float32 else 10.0,
                       lo=-20.0 if dtype == np.float32 else -10.0)
    y, dx = np.full(n, 7, dtype), np.full(n, 7, dtype)
    code = DTYPE_CODES[dtype]
    assert shim.shim_trunc_exp_forward(code, ptr(x), ptr(y), n, grid) == 0
    assert shim.shim_trunc_exp_backward(code, ptr(dy), ptr(x), ptr(dx), n, grid) == 0
    ref.assert_like(y, ref.forward(x), dtype)
    ref.assert_like(dx, ref.grad(dy, x), dtype)
