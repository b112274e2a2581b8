"""Checks the tests of the element-wise ops (the tests/test_<op>.py that
import this module) share: the static shapes a tf.function infers, and the TypeError
that names the float input."""
import numpy as np
import pytest
import tensorflow as tf


def assert_static_shape(op, input_shape, output_shape):
    """op(x) for x a float32 tf.TensorSpec(input_shape) has the static shape output_shape."""
    @tf.function(input_signature=[tf.TensorSpec(input_shape, tf.float32)])
    def f(x):
        y = op(x)
        assert y.shape.as_list() == output_shape
        return y

    f.get_concrete_function()


def assert_float_input_named(op, name, dtype, shape):
    """op rejects a `dtype` array, a `dtype` tensor and a string array of
    `shape` with a TypeError that names its input `name`."""
    for x in (np.zeros(shape, dtype), tf.zeros(shape, dtype), np.full(shape, "a")):
        with pytest.raises(TypeError, match=f"'{name}' must be float32 or float16"):
            op(x)
