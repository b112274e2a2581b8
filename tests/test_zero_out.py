"""ZeroOut: CPU kernel, gradient, the Metal shader via the MSL shim, vs tests/reference/zero_out.py."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.metal_shim.shim import i64, load_shim, ptr, u32
from tests.reference import zero_out as reference

pytestmark = pytest.mark.every_device

DTYPES = [np.int32, np.int64, np.float32, np.float64]


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 100, size=shape)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,preserve", [((), 0), ((0,), 0), ((0,), 7), ((5,), 4), ((2, 3, 4), 13), ((3, 0, 2), 2)])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_matches_reference(dtype, shape, preserve, mode):
    x = sample(shape, dtype)
    fn = metal_ops.zero_out if mode == "eager" else tf.function(metal_ops.zero_out)
    out = fn(x, preserve_index=preserve).numpy()
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, reference.zero_out(x, preserve))


def test_ten_million_elements():
    x = np.arange(10**7, dtype=np.int64) + 1
    out = metal_ops.zero_out(x, preserve_index=10**7 - 1).numpy()
    assert out[-1] == 10**7 and np.count_nonzero(out) == 1


def test_default_keeps_first_element():
    np.testing.assert_array_equal(metal_ops.zero_out([[5, 6], [7, 8]]).numpy(), [[5, 0], [0, 0]])


@pytest.mark.parametrize("preserve", [3, 100])
def test_preserve_index_out_of_range_is_invalid_argument(preserve):
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"preserve_index {preserve} .*'to_zero' with 3 elements"):
        metal_ops.zero_out(np.array([1, 2, 3], np.int32), preserve_index=preserve)


def test_negative_preserve_index_rejected():
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="preserve_index"):
        metal_ops.zero_out(np.array([1, 2, 3], np.int32), preserve_index=-1)


def test_unsupported_dtype_rejected():
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError)):
        metal_ops.zero_out(np.array([1, 2], np.uint8))


def test_shape_function_keeps_shape():
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def f(x):
        y = metal_ops.zero_out(x)
        assert y.shape.as_list() == [None, 4]
        return y

    f.get_concrete_function()


def test_gradient_passes_only_preserved_element():
    x = tf.constant(np.arange(1, 7, dtype=np.float64).reshape(2, 3))
    theoretical, numerical = tf.test.compute_gradient(lambda v: metal_ops.zero_out(v, preserve_index=4), [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)
    expected = np.zeros((6, 6))
    expected[4, 4] = 1
    np.testing.assert_allclose(theoretical[0], expected)


@pytest.mark.parametrize("dtype,name", [(np.int32, "int32"), (np.int64, "int64"), (np.float32, "float32")])
@pytest.mark.parametrize("n,preserve,grid", [(0, 0, 1), (1, 0, 1), (1000, 999, 256), (1000, 10, 64), (4097, 4096, 4096)])
def test_metal_shader_on_msl_shim(dtype, name, n, preserve, grid):
    lib = load_shim()
    x = sample((n,), dtype, seed=n)
    out = np.full_like(x, 9)
    getattr(lib, f"shim_zero_out_{name}")(ptr(x), ptr(out), i64(n), i64(preserve), u32(grid))
    np.testing.assert_array_equal(out, reference.zero_out(x, preserve))


def test_tutorial_op_is_importable_but_not_in_the_public_namespace():
    assert "zero_out" not in metal_ops.__all__
    assert callable(metal_ops.zero_out)
