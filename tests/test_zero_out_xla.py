"""ZeroOut and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import zero_out as zero_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error

pytestmark = XLA_MARKS


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("shape,index", [((5,), 4), ((3, 4), 7), ((0,), 0)])
def test_zero_out(dtype, shape, index):
    x = tf.constant(np.arange(1, 1 + np.prod(shape)).reshape(shape).astype(dtype))
    xla, plain = both(lambda t: metal_ops.zero_out(t, preserve_index=index), x)
    np.testing.assert_array_equal(xla, zero_ref.zero_out(x.numpy(), index))
    assert_same(xla, plain)


def test_zero_out_index_out_of_range_is_a_compile_error():
    message = compile_error(lambda t: metal_ops.zero_out(t, preserve_index=6), tf.zeros([2, 3]))
    assert "preserve_index 6 is out of range for input 'to_zero' with 6 elements" in message
