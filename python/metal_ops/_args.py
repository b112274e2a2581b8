"""The wrappers' dtype rule and the layers' one way to the ops' checks.

The dtype rule (README, "Dtypes"): each argument takes the dtypes its op's
kernels have for it; a tensor or array of another dtype is a TypeError
naming the op, the argument, what it takes and what it got, never a silent
cast; plain Python data converts to the argument's first dtype (where it
can: a list of floats for an integer argument stays floating, and is refused).
"""
import contextlib

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
