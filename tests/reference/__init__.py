"""Independent NumPy references of the ops (no TensorFlow: the CUDA harness
tests on a GPU machine without TensorFlow use them too). The references the
self-test ships are the package's (python/metal_ops/_reference): `packaged`
loads one from its file, without importing metal_ops (and TensorFlow)."""
import importlib.util
import os


def packaged(name, namespace):
    """Fills `namespace` (a module's globals()) with metal_ops/_reference/<name>.py's names."""
    package = importlib.util.find_spec("metal_ops")  # finds the package without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("metal_ops is not importable: run from the tree (pytest.ini) or install the package")
    path = os.path.join(list(package.submodule_search_locations)[0], "_reference", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"metal_ops_reference_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
