"""The wrappers' one dtype check: a tensor or array of a dtype the op does
not take is a TypeError naming the op and the argument, never a silent cast."""
import tensorflow as tf


def float_tensor(op, name, value, dtypes=(tf.float32,)):
    """`value` as a tensor of one of `dtypes`: plain Python data converted to
    the first, a tensor or array kept in its own dtype when it is one of them."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return tf.convert_to_tensor(value, dtype_hint=dtypes[0])
    try:
        tf_dtype = tf.as_dtype(dtype)
    except TypeError:  # strings, objects: no TF dtype
        tf_dtype = None
    if tf_dtype not in dtypes:
        allowed = " or ".join(d.name for d in dtypes)
        raise TypeError(f"{op}: '{name}' must be {allowed}, got {getattr(tf_dtype, 'name', dtype)}")
    return tf.convert_to_tensor(value)
