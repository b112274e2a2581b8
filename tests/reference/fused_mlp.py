"""FusedMLP's float64 NumPy reference and float16 error bound, shared by the
TF tests and the CUDA harness tests: the package's module
metal_ops/_fused_mlp_reference.py (the self-test uses it from an installed
package), loaded from its file so that no TensorFlow is imported (the
package's __init__ imports it; the CUDA harness tests run without)."""
import importlib.util
import os
import sys

_NAME = "metal_ops._fused_mlp_reference"


def _load():
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    package = importlib.util.find_spec("metal_ops")  # finds the package without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("metal_ops is not importable: run from the tree (pytest.ini) or install the package")
    path = os.path.join(list(package.submodule_search_locations)[0], "_fused_mlp_reference.py")
    spec = importlib.util.spec_from_file_location("metal_ops_fused_mlp_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ref = _load()
ALPHA = _ref.ALPHA
TRUNC_EXP_LIMIT = _ref.TRUNC_EXP_LIMIT
act = _ref.act
dact = _ref.dact
dact_from_output = _ref.dact_from_output
forward_backward = _ref.forward_backward
float16_bound = _ref.float16_bound
tf32_bound = _ref.tf32_bound
tf32_round = _ref.tf32_round
U32 = _ref.U32
worst_ratio = _ref.worst_ratio



def assert_within_float16_bound(bound, **results):
    """Each of the float16 kernel's results (y, hidden, dx, dws, dbs: see
    Float16Bound.ratios) within `bound` of the float64 reference, elementwise
    (also a tf32_bound's: the same model)."""
    bad = [f"{name}: error up to {ratio:.3g} times its error bound"
           for name, ratio in bound.ratios(**results) if not ratio <= 1.0]
    assert not bad, "; ".join(bad)
