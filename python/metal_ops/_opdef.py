"""An op's attributes as the library registered them: each op's C++
declaration (kernels/<op>/<op>.h, kernels/spec/op_attrs.h) writes its
REGISTER_OP attributes, and TensorFlow's op registry holds them, so a wrapper
reads a default or the allowed values here instead of writing them again."""
from tensorflow.python.framework import op_def_registry

from metal_ops._loader import load_library


def _attr(op_name, attr_name):
    load_library()
    op_def = op_def_registry.get(op_name)
    if op_def is None:
        raise KeyError(f"metal_ops: no op {op_name} is registered")
    for attr in op_def.attr:
        if attr.name == attr_name:
            return attr
    raise KeyError(f"metal_ops: op {op_name} has no attribute '{attr_name}'")


def _value(v):
    which = v.WhichOneof("value")
    if which == "s":
        return v.s.decode()
    if which == "list":
        return [s.decode() for s in v.list.s]
    return getattr(v, which) if which else None


def attr_default(op_name, attr_name):
    """The default of an op's attribute (an int, float, bool or str), or None."""
    attr = _attr(op_name, attr_name)
    return _value(attr.default_value) if attr.HasField("default_value") else None


def attr_choices(op_name, attr_name):
    """The allowed values of an enumerated string attribute, in declaration
    order, or None for an attribute of any value."""
    attr = _attr(op_name, attr_name)
    return _value(attr.allowed_values) if attr.HasField("allowed_values") else None


def choices_text(choices):
    """'a', 'b' or 'c', as the C++ checks' messages write a choice."""
    quoted = [f"'{c}'" for c in choices]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
