"""Independent NumPy references of the ops (no TensorFlow: the CUDA harness
tests on a GPU machine without TensorFlow use them too). The references are
the package's (python/metal_ops/_reference, which the self-test ships):
`packaged` loads one from its folder, without importing metal_ops (and
TensorFlow)."""
import importlib
import importlib.util
import os
import sys

_PACKAGE = "metal_ops_reference"  # metal_ops/_reference, loaded as a package of its own


def _load_package():
    if _PACKAGE in sys.modules:
        return
    package = importlib.util.find_spec("metal_ops")  # finds the package without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("metal_ops is not importable: run from the tree (pytest.ini) or install the package")
    folder = os.path.join(list(package.submodule_search_locations)[0], "_reference")
    spec = importlib.util.spec_from_file_location(_PACKAGE, os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = module
    spec.loader.exec_module(module)


def packaged(name, namespace):
    """Fills `namespace` (a module's globals()) with metal_ops/_reference/<name>.py's names."""
    _load_package()
    module = importlib.import_module(f"{_PACKAGE}.{name}")
    namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
