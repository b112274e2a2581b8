"""Independent float64 NumPy references of the ops, written from their
definitions (no TensorFlow, no code shared with the kernels).

`python -m metal_ops.selftest` checks the CPU kernels against them on a
machine without a GPU (references()); the test suite uses them too
(tests/reference loads this folder without importing metal_ops and
TensorFlow, for the CUDA harness tests that run without it). Each module's
`selftest(inputs, attrs)` takes a self-test case's inputs and attributes and
gives the case's outputs and, as a function of the cotangents (None for an op
without gradients), the gradients of sum(cotangent * output) with respect to
each input (None for an input without one).
"""
import importlib
import os
import pkgutil

# One module per op of the library, found in this folder (adding an op adds
# its module; tests/test_selftest.py checks that every op has one).
OPS = tuple(sorted(m.name for m in pkgutil.iter_modules([os.path.dirname(__file__)]) if not m.name.startswith("_")))


def references():
    """{op: its selftest(inputs, attrs) adapter}."""
    return {op: importlib.import_module(f"{__name__}.{op}").selftest for op in OPS}
