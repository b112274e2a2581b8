"""Shape, attribute and value abuse of every op the library registers,
generated from the op definitions themselves (so new ops are covered as they
land): the raw generated wrappers are called directly, bypassing the
hand-written Python checks, with random ranks, dims (0 included), allowed
dtypes, attribute values and special float values.

Invariants: the process never crashes; a rejected call raises a TF error,
ValueError or TypeError, and an eager kernel error names one of the op's
inputs or attributes; in graph mode the static shapes the shape function
infers agree with the shapes the kernel produces.
"""
import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import event, given
from hypothesis import strategies as st
from tensorflow.python.framework import op_def_library, op_def_registry

import metal_ops
from tests.fuzz.strategies import SPECIAL_F32, assert_names_argument, fuzz_settings

pytestmark = pytest.mark.source_tree("tools/check/check_op_library.py")


def library_ops():
    lib = metal_ops.load_library()
    names = sorted(n for n in dir(lib) if re.fullmatch(r"(MetalOps[A-Za-z0-9]+|ZeroOut)", n))
    return lib, names


LIB, OP_NAMES = library_ops()
NP_TYPES = {tf.float32: np.float32, tf.float64: np.float64, tf.float16: np.float16, tf.bfloat16: None,
            tf.int32: np.int32, tf.int64: np.int64, tf.bool: np.bool_, tf.uint8: np.uint8}
FLOAT_ATTR_VALUES = [0.0, 1e-4, 0.2, 0.5, 1.0, 1.5, 2.0, 10.0, -1.0, np.nan, np.inf, -np.inf]
# Errors a bad call may raise. OpError covers InvalidArgument, FailedPrecondition,
# OutOfRange, Unimplemented, ResourceExhausted (a TF status, never an abort).
ACCEPTED = (tf.errors.OpError, ValueError, TypeError)


def python_function(op_name):
    key = op_name.lower()
    for n in dir(LIB):
        if not n.startswith("_") and n.replace("_", "").lower() == key and n != op_name:
            return getattr(LIB, n)
    raise AssertionError(f"no generated wrapper for {op_name}")


def arg_names(op_def):
    return [a.name for a in op_def.input_arg] + [a.name for a in op_def.attr]


@st.composite
def attr_values(draw, op_def):
    number_attrs = {a.number_attr for a in op_def.input_arg if a.number_attr}
    type_attrs = {a.type_attr for a in op_def.input_arg if a.type_attr}
    out = {}
    for attr in op_def.attr:
        lo = attr.minimum if attr.has_minimum else -2
        if attr.type == "type":
            allowed = list(attr.allowed_values.list.type) or [tf.float32.as_datatype_enum]
            allowed = [tf.as_dtype(t) for t in allowed if tf.as_dtype(t) in NP_TYPES]
            out[attr.name] = draw(st.sampled_from(allowed))
        elif attr.type == "int":
            if attr.name in number_attrs:
                out[attr.name] = draw(st.integers(max(lo, 0), max(lo, 0) + 2))
            else:
                out[attr.name] = draw(st.one_of(st.integers(lo, lo + 12), st.integers(lo, lo + 40)))
        elif attr.type == "float":
            out[attr.name] = float(draw(st.sampled_from(FLOAT_ATTR_VALUES)))
        elif attr.type == "bool":
            out[attr.name] = draw(st.booleans())
        elif attr.type == "string":
            allowed = [s.decode() for s in attr.allowed_values.list.s]
            out[attr.name] = draw(st.sampled_from(allowed)) if allowed else draw(st.sampled_from(["", "x"]))
        elif attr.type == "list(int)":
            sane = st.lists(st.integers(1, 3), min_size=4, max_size=4).map(lambda v: [1, v[1], v[2], 1])
            out[attr.name] = draw(st.one_of(sane, sane, st.lists(st.integers(-1, 3), min_size=0, max_size=9)))
        elif attr.type == "list(float)":
            out[attr.name] = draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.0]), min_size=0, max_size=7))
        elif attr.HasField("default_value"):
            continue
        else:
            pytest.fail(f"fuzzer does not know attr type {attr.type} of {op_def.name}.{attr.name}")
    assert type_attrs <= set(out), "every type attr is drawn"
    return out


@st.composite
def tensor_value(draw, dtype, dims_pool):
    rank = draw(st.integers(0, 4))
    shape = [draw(st.sampled_from(dims_pool)) for _ in range(rank)]
    np_type = NP_TYPES[dtype]
    mode = draw(st.sampled_from(["normal", "sorted", "zeros", "special", "ints"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.is_integer:
        value = rng.integers(-3, 10, size=shape)
    elif dtype == tf.bool:
        value = rng.random(shape) < 0.5
    elif mode == "zeros":
        value = np.zeros(shape)
    elif mode == "sorted":  # non-negative and non-decreasing along the last axis
        value = np.abs(rng.normal(size=shape))
        if rank:
            value = np.cumsum(value, axis=-1)
    elif mode == "special":
        value = rng.normal(size=shape)
        if value.size:
            flat = value.reshape(-1)
            flat[rng.integers(0, flat.size)] = SPECIAL_F32[rng.integers(0, len(SPECIAL_F32))]
    elif mode == "ints":
        value = rng.integers(-2, 5, size=shape).astype(np.float64)
    else:
        value = rng.normal(size=shape)
    if np_type is None:  # bfloat16
        return tf.cast(tf.constant(np.asarray(value, np.float32)), dtype)
    return tf.constant(np.asarray(value).astype(np_type) if np_type is not np.float16 else np.clip(value, -6e4, 6e4).astype(np_type))


@st.composite
def op_call(draw):
    op_name = draw(st.sampled_from(OP_NAMES))
    op_def = op_def_registry.get(op_name)
    attrs = draw(attr_values(op_def))
    R, S = draw(st.integers(0, 4)), draw(st.integers(0, 5))
    dims_pool = sorted({R, S, S + 1, 0, 1, 2, 3})
    kwargs = {}
    for arg in op_def.input_arg:
        dtype = attrs[arg.type_attr] if arg.type_attr else tf.as_dtype(arg.type)
        if arg.number_attr:
            kwargs[arg.name] = [draw(tensor_value(dtype, dims_pool)) for _ in range(attrs[arg.number_attr])]
        else:
            kwargs[arg.name] = draw(tensor_value(dtype, dims_pool))
    inferred = {a.type_attr for a in op_def.input_arg if a.type_attr} | {
        a.number_attr for a in op_def.input_arg if a.number_attr}
    call_attrs = {k: v for k, v in attrs.items() if k not in inferred}
    return op_name, op_def, kwargs, call_attrs


def _flat(outputs):
    if isinstance(outputs, (tf.Tensor, tf.Operation)):
        return [outputs]
    return [o for o in outputs if isinstance(o, tf.Tensor)]


def run_eager(op_name, op_def, kwargs, attrs):
    try:
        outputs = python_function(op_name)(**kwargs, **attrs)
    except tf.errors.InvalidArgumentError as e:
        event(f"{op_name} eager: InvalidArgument")
        assert_names_argument(e, *arg_names(op_def))
        return
    except ACCEPTED as e:
        event(f"{op_name} eager: {type(e).__name__}")
        return
    for o in _flat(outputs):
        o.numpy()
    event(f"{op_name} eager: ran")


def run_graph(op_name, op_def, kwargs, attrs, known):
    """Placeholders with some dims unknown: shape function with partial
    shapes, then the kernel in the graph executor; static vs actual shapes."""
    g = tf.Graph()
    feeds = {}
    with g.as_default():
        def placeholder(t, i):
            shape = [d if known[(i + j) % len(known)] else None for j, d in enumerate(t.shape)]
            ph = tf.compat.v1.placeholder(t.dtype, shape=shape)
            feeds[ph] = t.numpy()
            return ph

        graph_kwargs = {}
        for i, (k, v) in enumerate(kwargs.items()):
            graph_kwargs[k] = [placeholder(t, i + j) for j, t in enumerate(v)] if isinstance(v, list) else placeholder(v, i)
        try:
            _, _, op, outputs = op_def_library._apply_op_helper(op_name, **graph_kwargs, **attrs)
        except ACCEPTED as e:
            event(f"{op_name} graph: rejected at construction ({type(e).__name__})")
            return
        outputs = list(op.outputs)
    with tf.compat.v1.Session(graph=g) as sess:
        try:
            values = sess.run(outputs, feed_dict=feeds)
        except ACCEPTED as e:
            event(f"{op_name} graph: rejected at run ({type(e).__name__})")
            return
    event(f"{op_name} graph: ran")
    for tensor, value in zip(outputs, values):
        assert tensor.shape.is_compatible_with(value.shape), (
            f"{op_name}: shape function says {tensor.shape} for output {tensor.name}, kernel made {value.shape}")


@fuzz_settings(max_examples_fraction=4.0)
@given(call=op_call(), graph=st.booleans(), known=st.lists(st.booleans(), min_size=3, max_size=3))
def test_raw_ops_never_crash(call, graph, known):
    op_name, op_def, kwargs, attrs = call
    if graph:
        run_graph(op_name, op_def, kwargs, attrs, known)
    else:
        run_eager(op_name, op_def, kwargs, attrs)


def test_fuzzer_sees_every_declared_op():
    """Every REGISTER_OP of the op definitions (tools/check/check_op_library.py) is in the loaded library and fuzzed here."""
    from tools.check.check_op_library import declared_ops

    assert declared_ops() <= set(OP_NAMES)
