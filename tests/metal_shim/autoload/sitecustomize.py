"""Loads the strict model of Metal (tests/metal_shim/model.py) at the start
of a Python process whose METAL_OPS_METAL names a model route. The test
harness puts this folder on the PYTHONPATH of the processes it runs through
the model (tests/conftest.py, tests/test_metal_plans.py), so a process a test
starts finds the model as its parent did; the package never loads it."""
import importlib.util
import os

if os.environ.get("METAL_OPS_METAL") in ("shim", "shim-stream"):
    _spec = importlib.util.spec_from_file_location(
        "_metal_ops_test_model", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model.py"))
    _model = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_model)
    _model.load()
