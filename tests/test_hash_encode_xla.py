"""HashEncode and its gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on every device: tests/xla_checks.py says how."""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import hash_encode as hash_ref
from tests.xla_checks import XLA_MARKS, cuda_handlers_on_a_gpu  # noqa: F401  (the fixture: autouse)
from tests.xla_checks import assert_same, both, compile_error, with_grad

pytestmark = XLA_MARKS

# The XLA kernels a test compiles beyond the op's own, by a word of its name.
EXTRA_XLA_OPS = {"second_derivatives": ("MetalOpsHashEncodeGradGrad",)}


GRID = dict(num_levels=4, log2_hashmap_size=10, base_resolution=4, per_level_scale=1.6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("dims,features", [(3, 2), (1, 1), (4, 8)])
@pytest.mark.parametrize("n", [300, 0])
@pytest.mark.parametrize("modes", [("linear", "clamp"), ("smoothstep", "wrap")])
def test_hash_encode_and_gradients(dtype, dims, features, n, modes):
    rng = np.random.default_rng(n + dims)
    rows = metal_ops.hash_grid_size(dims, **GRID)
    x = tf.constant(rng.uniform(-0.05, 1.05, (n, dims)).astype(np.float32))
    table = tf.constant(rng.uniform(-1, 1, (rows, features)).astype(dtype))
    g = tf.constant(rng.normal(size=(n, GRID["num_levels"] * features)).astype(dtype))
    kw = dict(GRID, interpolation=modes[0], out_of_range=modes[1])
    op = lambda x, t: metal_ops.hash_encode(x, t, **kw)  # noqa: E731
    xla, plain = both(with_grad(op, x, table, output_grad=g), x, table)
    tol = 1e-5 if dtype == np.float32 else 2e-2
    want = hash_ref.encode(x.numpy(), table.numpy(), **kw)
    np.testing.assert_allclose(xla[0].astype(np.float64), want, rtol=tol, atol=tol)
    d_table, _ = hash_ref.encode_grads(x.numpy(), table.numpy(), g.numpy(), **kw)
    np.testing.assert_allclose(xla[1][1].astype(np.float64), d_table, rtol=10 * tol, atol=10 * tol)
    # The table gradient is summed in a fixed order: the same bits with XLA as without.
    assert_same(xla, plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", [200, 0])
def test_hash_encode_second_derivatives(dtype, n):
    """The input gradient's gradients (MetalOpsHashEncodeGradGrad: the
    table's and grad_encoded's) under XLA, as without it, to the bit."""
    rng = np.random.default_rng(n)
    rows = metal_ops.hash_grid_size(3, **GRID)
    x = tf.constant(rng.uniform(0, 1, (n, 3)).astype(np.float32))
    table = tf.constant(rng.uniform(-1, 1, (rows, 2)).astype(dtype))
    w = tf.constant(rng.normal(size=(n, GRID["num_levels"] * 2)).astype(dtype))
    v = tf.constant(rng.normal(size=(n, 3)).astype(np.float32))

    def fn(x, table, w):
        with tf.GradientTape() as outer:
            outer.watch([table, w])
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = metal_ops.hash_encode(x, table, **GRID)
                s = tf.reduce_sum(tf.cast(y * w, tf.float32))
            dx = inner.gradient(s, x)
            loss = tf.reduce_sum(dx * v)
        return dx, outer.gradient(loss, [table, w])

    xla, plain = both(fn, x, table, w)
    assert_same(xla, plain)
    assert np.isfinite(xla[1][0].astype(np.float32)).all() and (n == 0 or np.abs(xla[1][0]).max() > 0)


def test_hash_encode_grad_grad_bad_shape_is_a_compile_error():
    lib = metal_ops.load_library()
    rows = metal_ops.hash_grid_size(3, **GRID)
    message = compile_error(lambda gg, g, x, t: lib.metal_ops_hash_encode_grad_grad(gg, g, x, t, **GRID),
                            tf.zeros([5, 2]), tf.zeros([5, 8]), tf.zeros([5, 3]), tf.zeros([rows, 2]))
    assert "grad_grad_inputs" in message


def test_hash_encode_table_of_the_wrong_size_is_a_compile_error():
    table = tf.zeros([metal_ops.hash_grid_size(3, **GRID) + 1, 2])
    message = compile_error(lambda x, t: metal_ops.hash_encode(x, t, **GRID), tf.zeros([5, 3]), table)
    assert "table" in message
