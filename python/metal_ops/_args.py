"""The wrappers' dtype rule and the layers' one way to the ops' checks.

The dtype rule (README, "Dtypes"): each argument takes the dtypes its op's
kernels have for it; a tensor or array of another dtype is a TypeError
naming the op, the argument, what it takes and what it got, never a silent
cast; plain Python data converts to the argument's first dtype (where it
can: a list of floats for an integer argument stays floating, and is refused).
"""
import contextlib
import functools
import numbers

import numpy as np
import tensorflow as tf

# kernels/spec/checks_tf.h's kSpecPayload: a failed check's own message.
SPEC_PAYLOAD = "metal_ops.spec"


def float_tensor(op, name, value, dtypes=(tf.float32,), like=None):
    """`value` as a tensor of one of `dtypes` (the dtype rule): plain Python
    data converted to the first where it can be, a tensor or array kept in its
    own dtype when it is one of them, else a TypeError.
    `like`: the argument whose dtype `dtypes` is (named in the message)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        value = tf.convert_to_tensor(value, dtype_hint=dtypes[0])
        dtype = value.dtype
    try:
        tf_dtype = tf.as_dtype(dtype)
    except TypeError:  # strings, objects: no TF dtype
        tf_dtype = None
    if tf_dtype not in dtypes:
        allowed = " or ".join(d.name for d in dtypes) + (f" (the dtype of '{like}')" if like else "")
        raise TypeError(f"{op}: '{name}' must be {allowed}, got {getattr(tf_dtype, 'name', dtype)}")
    return tf.convert_to_tensor(value)


def spec_message(error):
    """The op's own message (kernels/spec) of `error`, an exception TensorFlow
    raised from one of the ops' kernels (eager execution keeps the payload),
    or of the error it was raised from; None for TensorFlow's own checks."""
    while error is not None:
        payloads = getattr(error, "experimental_payloads", None) or {}
        payload = payloads.get(SPEC_PAYLOAD, payloads.get(SPEC_PAYLOAD.encode()))
        if payload is not None:
            return payload.decode() if isinstance(payload, bytes) else str(payload)
        error = error.__cause__ or error.__context__
    return None


@contextlib.contextmanager
def spec_errors(suffix="", error=ValueError):
    """Re-raises a failed op check (an error carrying the op's own message,
    spec_message) as error(that message + `suffix`), without the node
    TensorFlow adds to the text; TensorFlow's own errors pass unchanged."""
    try:
        yield
    except (tf.errors.OpError, ValueError, TypeError) as e:
        message = spec_message(e)
        if message is None:
            raise
        raise error(message + suffix) from None


def invalid_argument(message):
    """tf.errors.InvalidArgumentError(message): an op's error, raised from Python."""
    return tf.errors.InvalidArgumentError(None, None, message)


# The arguments that become an op's attributes: each is checked in Python,
# against the op's own definition (REGISTER_OP in ops/<op>_op.cc: the
# attribute's type, its minimum, its list of values), before the op runs, so
# a mistake is a TypeError or ValueError naming the argument, what it must
# be and what it got (never TensorFlow's NodeDef text). Ranges that depend
# on several arguments stay the op's own checks (kernels/<op>/<op>_spec.h).

def integer(owner, name, value, minimum=None):
    """`value` as an int: a Python or NumPy integer (not a bool, a float or a
    string: TypeError), at least `minimum` when one is given (ValueError)."""
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: '{name}' must be an integer{bound}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}: '{name}' must be an integer{bound}, got {value!r}")
    return int(value)


def number(owner, name, value):
    """`value` as a float: a Python or NumPy real number (not a bool or a string: TypeError)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: '{name}' must be a number, got {value!r}")
    return float(value)


def boolean(owner, name, value):
    """`value` as a bool: True or False (a NumPy bool too); anything else is a TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}: '{name}' must be True or False, got {value!r}")
    return bool(value)


def choice(owner, name, value, choices):
    """`value`, one of the strings `choices`: another string is a ValueError,
    anything else a TypeError, both listing the choices."""
    listed = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise TypeError(f"{owner}: '{name}' must be one of {listed}, got {value!r}")
    if value not in choices:
        raise ValueError(f"{owner}: '{name}' must be one of {listed}, got {value!r}")
    return value


@functools.lru_cache(maxsize=None)
def _attr_defs(op_name):
    from tensorflow.python.framework import op_def_registry

    from metal_ops._loader import load_library

    load_library()  # registers the ops
    op_def = op_def_registry.get(op_name)
    if op_def is None:
        raise RuntimeError(f"{op_name} is not registered (metal_ops.load_library() loads the ops)")
    return {a.name: a for a in op_def.attr}


def op_attrs(owner, op_name, **attrs):
    """`attrs` (the arguments that become attributes of the op `op_name`)
    checked against the op's definition and converted: an int attribute by
    `integer` (with the op's minimum), a float by `number`, a bool by
    `boolean`, a string with a list of values by `choice`. `owner` names the
    function or layer in the messages."""
    defs = _attr_defs(op_name)
    checked = {}
    for name, value in attrs.items():
        attr = defs[name]
        if attr.type == "int":
            checked[name] = integer(owner, name, value, attr.minimum if attr.has_minimum else None)
        elif attr.type == "float":
            checked[name] = number(owner, name, value)
        elif attr.type == "bool":
            checked[name] = boolean(owner, name, value)
        elif attr.type == "string" and attr.allowed_values.list.s:
            checked[name] = choice(owner, name, value, [s.decode() for s in attr.allowed_values.list.s])
        else:
            checked[name] = value
    return checked


def register_gradient_op(op_name, grad_op):
    """Registers the gradient of the op `op_name` as its gradient op: the
    library's function `grad_op` (`metal_ops_<op>_grad`) of the upstream
    gradient and the op's inputs, with the op's attributes but T; its outputs
    are the inputs' gradients, in order."""
    from metal_ops._loader import load_library

    @tf.RegisterGradient(op_name)
    def _gradient(op, grad):
        attrs = {name: op.get_attr(name) for name in _attr_defs(op_name) if name != "T"}
        grads = getattr(load_library(), grad_op)(grad, *op.inputs, **attrs)
        return list(grads) if isinstance(grads, (list, tuple)) else [grads]

    return _gradient
