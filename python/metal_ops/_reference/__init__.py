"""Independent float64 NumPy references of the ops, written from their
definitions (no TensorFlow, no code shared with the kernels).

`python -m metal_ops.selftest` checks the CPU kernels against them on a
machine without a GPU (references()); the test suite uses them too
(tests/reference loads these files without importing TensorFlow, for the
CUDA harness tests that run without it). Each module's
`selftest(inputs, attrs)` gives a self-test case's outputs and the gradients
of sum(cotangent * output) as a function of the cotangents.
"""
import importlib

# The ops with a reference here (the others are checked by the test suite,
# against tests/reference).
OPS = ("distortion_loss", "ray_march", "scene_contract", "sh_encode", "trunc_exp", "zero_out")


def references():
    """{op: its selftest(inputs, attrs) adapter}."""
    return {op: importlib.import_module(f"metal_ops._reference.{op}").selftest for op in OPS}
