"""Ops of one family each write a REGISTER_OP chain (kernels/*/*_op.cc);
what they share must agree: the attributes both ops have (type, default,
allowed values, minimum), the outputs both have, and a backward's inputs that
carry a forward's outputs. Read from the op definitions TensorFlow registered
when the library loaded."""
import pytest
from tensorflow.python.framework import op_def_registry

from metal_ops._loader import load_library

# Each family: its ops and what every one of them must have (so that a
# renamed attribute cannot make the comparison vacuous).
FAMILIES = {
    "renderers": (["MetalOpsVolumeRender", "MetalOpsVolumeRenderGrad", "MetalOpsPackedVolumeRender",
                   "MetalOpsPackedVolumeRenderGrad"], {"T", "early_termination"}),
    "hash grid": (["MetalOpsHashEncode", "MetalOpsHashEncodeGrad", "MetalOpsHashEncodeGradGrad"],
                  {"T", "num_levels", "log2_hashmap_size", "base_resolution", "per_level_scale", "interpolation",
                   "out_of_range"}),
    "ray march": (["MetalOpsRayMarch", "MetalOpsRayMarchStatic"],
                  {"aabb", "grid_resolution", "step_size", "cone_angle", "max_step_size", "max_samples", "jitter"}),
}


def op_def(name):
    load_library()
    found = op_def_registry.get(name)
    assert found is not None, f"{name} is not registered"
    return found


def attr_signature(attr):
    return (attr.type, attr.default_value.SerializeToString(deterministic=True),
            attr.allowed_values.SerializeToString(deterministic=True), attr.has_minimum, attr.minimum)


def arg_signature(arg):
    return (arg.type, arg.type_attr, arg.number_attr, arg.type_list_attr, arg.is_ref)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shared_attributes_agree(family):
    names, required = FAMILIES[family]
    defs = {n: op_def(n) for n in names}
    seen = {}  # attribute name -> (op, signature) of its first definition
    for name, d in defs.items():
        attrs = {a.name: a for a in d.attr}
        missing = required - set(attrs)
        assert not missing, f"{name} lacks the {family} attributes {sorted(missing)}"
        for attr_name, attr in attrs.items():
            first = seen.setdefault(attr_name, (name, attr_signature(attr), attr))
            assert first[1] == attr_signature(attr), (
                f"attribute {attr_name}: {first[0]} has {first[2]}, {name} has {attr}")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_shared_outputs_and_forwarded_inputs_agree(family):
    names, _ = FAMILIES[family]
    defs = {n: op_def(n) for n in names}
    outputs = {}  # output name -> (op, signature)
    for name, d in defs.items():
        for arg in d.output_arg:
            first = outputs.setdefault(arg.name, (name, arg_signature(arg)))
            assert first[1] == arg_signature(arg), f"output {arg.name}: {first[0]} and {name} differ"
    compared = 0
    for name, d in defs.items():
        for arg in d.input_arg:
            if arg.name in outputs:
                compared += 1
                op, signature = outputs[arg.name]
                assert signature == arg_signature(arg), f"{name}'s input {arg.name} differs from {op}'s output"
    if family == "renderers":
        # Each backward takes the forward's four outputs back.
        assert compared == 8


def test_static_ray_march_has_ray_marchs_inputs_and_outputs_first():
    dynamic, static = op_def("MetalOpsRayMarch"), op_def("MetalOpsRayMarchStatic")
    assert [(a.name, arg_signature(a)) for a in static.input_arg] == [
        (a.name, arg_signature(a)) for a in dynamic.input_arg]
    assert [a.name for a in static.output_arg] == [a.name for a in dynamic.output_arg] + ["num_samples", "num_rays"]


def test_backward_takes_the_forward_inputs_first():
    for forward in ["MetalOpsVolumeRender", "MetalOpsPackedVolumeRender"]:
        fwd, bwd = op_def(forward), op_def(forward + "Grad")
        n = len(fwd.input_arg)
        assert [(a.name, arg_signature(a)) for a in bwd.input_arg[:n]] == [
            (a.name, arg_signature(a)) for a in fwd.input_arg]
        assert [a.name for a in bwd.input_arg[n:]] == [a.name for a in fwd.output_arg] + [
            "grad_" + a.name.replace("out_", "") for a in fwd.output_arg]


# ---- attributes written by an op's C++ declaration (kernels/spec/op_attrs.h) ----

@pytest.mark.parametrize("op_name,attr,default,choices", [
    ("MetalOpsSHEncode", "degree", 4, None),
    ("MetalOpsSHEncodeGrad", "degree", 4, None),
    ("MetalOpsSceneContract", "norm", "l2", ["l2", "linf"]),
    ("MetalOpsSceneContractGrad", "norm", "l2", ["l2", "linf"]),
])
def test_declared_attributes_reach_the_registry_and_the_wrappers_helper(op_name, attr, default, choices):
    from metal_ops._opdef import attr_choices, attr_default

    assert attr_default(op_name, attr) == default
    assert attr_choices(op_name, attr) == choices
    names = [a.name for a in op_def(op_name).attr]
    assert names == [attr, "T"], names


def test_an_op_without_attributes_declares_only_its_type():
    for name in ("MetalOpsTruncExp", "MetalOpsTruncExpGrad"):
        assert [a.name for a in op_def(name).attr] == ["T"]
