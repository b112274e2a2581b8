"""How the ops and their gradient ops are tested under XLA
(`tf.function(jit_compile=True)`, docs/XLA.md), in each op's
tests/test_<op>_xla.py: values and gradients against NumPy references
(tests/reference/) and against the same ops without XLA, shapes (empty ones
too) and dtypes, attributes passed to the handler, and bad inputs refused
while XLA compiles with the TensorFlow kernels' messages. Each test runs on
every device (tests/devices.py): on the CPU through the host handlers, on a
CUDA GPU through the CUDA handlers, where every op it compiles has one
(`metal_ops._loader.xla_cuda_ops()`; skipped otherwise, naming the op). Values
a kernel checks at run time are checked on the CPU alone (cpu_semantics).

A test module takes `pytestmark = XLA_MARKS` and imports the autouse fixture
cuda_handlers_on_a_gpu."""
import sys

import numpy as np
import pytest
import tensorflow as tf

from metal_ops import _loader, selftest

XLA_MARKS = [
    pytest.mark.every_device,
    pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA: the macOS build has no XLA kernels"),
]


def ops_of(test_name, extra=None):
    """The XLA kernels a test compiles: those of the op its name starts with
    (test_<op>_...: selftest.xla_ops()), and `extra` ({word: ops}, a test
    module's EXTRA_XLA_OPS) for a word in its name."""
    xla_ops = selftest.xla_ops()
    op = max((k for k in xla_ops if f"{test_name}_".startswith(f"test_{k}_")), key=len, default=None)
    if op is None:
        return ()
    return xla_ops[op] + tuple(o for word, ops in (extra or {}).items() if word in test_name for o in ops)


_ON_GPU = [False]


@pytest.fixture(autouse=True)
def cuda_handlers_on_a_gpu(request, tf_device):
    """On a GPU, a test runs where every op it compiles has a CUDA handler."""
    _ON_GPU[0] = bool(tf_device) and "GPU" in tf_device
    if _ON_GPU[0]:
        compiled = ops_of(request.node.originalname, getattr(request.module, "EXTRA_XLA_OPS", None))
        missing = [op for op in compiled if op not in _loader.xla_cuda_ops()]
        if missing:
            pytest.skip(f"no CUDA handler for {', '.join(missing)} (docs/XLA.md)")


def on_gpu():
    """Whether the running test runs on a GPU (the autouse fixture sets it)."""
    return _ON_GPU[0]


def both(fn, *args):
    """fn(*args) under XLA and without it, as NumPy values (nested like fn's result)."""
    xla = tf.function(fn, jit_compile=True)(*args)
    plain = tf.function(fn, jit_compile=False)(*args)
    return tf.nest.map_structure(np.asarray, xla), tf.nest.map_structure(np.asarray, plain)


def assert_same(xla, plain, rtol=0.0, atol=0.0):
    """XLA's results against the op's without XLA: the same kernels, so the
    same bits on the CPU. On a GPU, sums the CUDA kernels form with atomics
    (table and parameter gradients) differ in order from run to run."""
    if _ON_GPU[0]:
        half = any(a.dtype.itemsize < 4 for a in tf.nest.flatten(xla))
        rtol, atol = max(rtol, 1e-2 if half else 1e-5), max(atol, 1e-2 if half else 1e-5)
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
