"""The ops and their gradient ops under XLA (`tf.function(jit_compile=True)`,
docs/XLA.md) on the CPU: values and gradients against NumPy references
(tests/reference/) and against the same ops without XLA, shapes (empty ones
too) and dtypes, attributes passed to the handler, bad inputs refused while
XLA compiles with the TensorFlow kernels' messages, and the rule that the
library must load before XLA's first compilation. On the CPU: the XLA
kernels have host handlers only."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import hash_encode as hash_ref
from tests.reference import trunc_exp as trunc_ref
from tests.reference import zero_out as zero_ref

pytestmark = [
    pytest.mark.cpu_semantics("the XLA kernels have host handlers only (no CUDA handlers yet)"),
    pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA: the macOS build has no XLA kernels"),
]


def both(fn, *args):
    """fn(*args) under XLA and without it, as NumPy values (nested like fn's result)."""
    xla = tf.function(fn, jit_compile=True)(*args)
    plain = tf.function(fn, jit_compile=False)(*args)
    return tf.nest.map_structure(np.asarray, xla), tf.nest.map_structure(np.asarray, plain)


def assert_same(xla, plain, rtol=0.0, atol=0.0):
    for a, b in zip(tf.nest.flatten(xla), tf.nest.flatten(plain)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


def with_grad(op, *watched, output_grad):
    """op(*watched) and the gradients of sum(op * output_grad) for every watched input."""
    def fn(*xs):
        with tf.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            y = op(*xs)
        return y, tape.gradient(y, list(xs), output_gradients=output_grad)
    return fn


def compile_error(fn, *args):
    """The error of compiling fn(*args) with XLA, traced with unknown sizes (so
    that the shape functions pass and the XLA kernel's checks, on the static
    shapes, refuse the input)."""
    signature = [tf.TensorSpec([None] * a.shape.rank, a.dtype) for a in args]
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        tf.function(fn, jit_compile=True, input_signature=signature)(*args)
    return str(info.value)


# ---- ZeroOut ----------------------------------------------------------------------------

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


# ---- TruncExp ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1000,), (33, 17), (), (4, 0)])
def test_trunc_exp_and_gradient(dtype, shape):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-10, 10, shape).astype(dtype))
    dy = tf.constant(rng.uniform(-2, 2, shape).astype(dtype))
    xla, plain = both(with_grad(metal_ops.trunc_exp, x, output_grad=dy), x)
    trunc_ref.assert_like(xla[0], trunc_ref.forward(x.numpy()), dtype)
    trunc_ref.assert_like(xla[1][0], trunc_ref.grad(dy.numpy(), x.numpy()), dtype)
    assert_same(xla, plain)


def test_trunc_exp_grad_shape_mismatch_is_a_compile_error():
    lib = metal_ops.load_library()
    message = compile_error(lambda dy, x: lib.metal_ops_trunc_exp_grad(dy, x), tf.zeros([3]), tf.zeros([4]))
    assert "TruncExpGrad: 'dy' has shape [3] but 'x' has shape [4]" in message


# ---- FusedMLP ---------------------------------------------------------------------------

def mlp_params(rng, widths):
    kernels = [tf.constant(rng.normal(0, 0.5, (a, b)).astype(np.float32)) for a, b in zip(widths, widths[1:])]
    biases = [tf.constant(rng.normal(0, 0.1, (b,)).astype(np.float32)) for b in widths[1:]]
    return kernels, biases


@pytest.mark.parametrize("rows", [37, 0])
@pytest.mark.parametrize("widths,activation,output_activation", [
    ((8, 16, 4), "relu", None),
    ((5, 32, 32, 3), "leaky_relu", "sigmoid"),
    ((3, 16, 16, 16, 1), "softplus", "trunc_exp"),
])
def test_fused_mlp_and_gradient(rows, widths, activation, output_activation):
    rng = np.random.default_rng(rows)
    x = tf.constant(rng.normal(size=(rows, widths[0])).astype(np.float32))
    kernels, biases = mlp_params(rng, widths)
    g = tf.constant(rng.normal(size=(rows, widths[-1])).astype(np.float32))

    def op(x, *params):
        n = len(params) // 2
        return metal_ops.fused_mlp(x, list(params[:n]), list(params[n:]), activation=activation,
                                   output_activation=output_activation, leaky_relu_alpha=0.1)

    xla, plain = both(with_grad(op, x, *kernels, *biases, output_grad=g), x, *kernels, *biases)
    assert_same(xla, plain, rtol=1e-5, atol=1e-5)


def test_fused_mlp_bad_kernel_shape_is_a_compile_error():
    rng = np.random.default_rng(0)
    kernels, biases = mlp_params(rng, (8, 16, 4))
    kernels[1] = tf.zeros([15, 4])
    message = compile_error(lambda x: metal_ops.fused_mlp(x, kernels, biases), tf.zeros([4, 8]))
    assert "FusedMLP" in message


# ---- HashEncode -------------------------------------------------------------------------

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


def test_hash_encode_table_of_the_wrong_size_is_a_compile_error():
    table = tf.zeros([metal_ops.hash_grid_size(3, **GRID) + 1, 2])
    message = compile_error(lambda x, t: metal_ops.hash_encode(x, t, **GRID), tf.zeros([5, 3]), table)
    assert "table" in message


# ---- Registration ----------------------------------------------------------------------

def _run_child(code):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return proc.returncode, proc.stdout + proc.stderr


def test_importing_metal_ops_before_the_first_compile_gives_xla_kernels():
    rc, out = _run_child("""
        import tensorflow as tf
        import metal_ops
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2]))  # XLA's first compilation
        y = tf.function(metal_ops.trunc_exp, jit_compile=True)(tf.zeros([3]))
        print("ok", y.numpy().tolist())
    """)
    assert rc == 0 and "ok [1.0, 1.0, 1.0]" in out, out


def test_a_library_loaded_after_the_first_compile_has_no_xla_kernels():
    """XLA takes op kernels in once: importing metal_ops after a compilation is too late (docs/XLA.md)."""
    rc, out = _run_child("""
        import warnings
        import tensorflow as tf
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import metal_ops
        print("warned:", [str(w.message) for w in caught if w.category is RuntimeWarning])
        print("has_xla_kernels:", metal_ops._loader.has_xla_kernels(), metal_ops.layers.FusedMLP(4).supports_jit)
        print("runs:", metal_ops.trunc_exp(tf.zeros([2])).numpy().tolist())
        try:
            tf.function(metal_ops.trunc_exp, jit_compile=True)(tf.zeros([3]))
        except tf.errors.InvalidArgumentError as e:
            print("refused:", str(e).splitlines()[0])
    """)
    assert rc == 0 and "refused:" in out and "MetalOpsTruncExp" in out, out
    assert "warned: ['metal_ops: XLA compiled a function in this process before" in out, out
    assert "Import metal_ops before the first XLA compilation" in out, out
    assert "has_xla_kernels: False False" in out and "runs: [1.0, 1.0]" in out, out
