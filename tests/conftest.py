import ast
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Whether the tests run in a clone; tools/check/wheel_test.sh runs a copy of tests/
# against the installed wheel, without the tree.
SOURCE_TREE = os.path.isfile(os.path.join(ROOT, "Makefile")) and os.path.isdir(os.path.join(ROOT, "kernels"))
# A module that tests the tree itself (its sources, build files, the examples,
# the Metal shaders through the MSL shim, the macOS build), not the package,
# says so: `pytestmark = pytest.mark.source_tree("what it reads")`; a single
# test of a package module, with the same mark on the test. Without the tree
# such a module is one skip with that reason (it is not imported: it may
# import the tree), such a test a skip.
SKIP_REASON = "needs the source tree ({}); this suite runs against an installed package"


def _module_source_tree_reason(path):
    """The reason of the module's `pytestmark = ... source_tree("...") ...`, or None."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            for call in ast.walk(node.value):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "source_tree" and call.args):
                    return ast.literal_eval(call.args[0])
    return None


class _NeedsSourceTree(pytest.File):
    def collect(self):
        pytest.skip(SKIP_REASON.format(self.reason))


def pytest_pycollect_makemodule(module_path, parent):
    if SOURCE_TREE:
        return None
    reason = _module_source_tree_reason(module_path)
    if reason is None:
        return None
    module = _NeedsSourceTree.from_parent(parent, path=module_path)
    module.reason = reason
    return module


def pytest_collection_modifyitems(config, items):
    if SOURCE_TREE:
        return
    for item in items:
        mark = item.get_closest_marker("source_tree")
        if mark:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON.format(mark.args[0])))


def pytest_generate_tests(metafunc):
    """Every test of a module marked every_device runs on each device of
    tests/devices.py; a test marked cpu_semantics runs on /CPU:0 alone."""
    if "tf_device" not in metafunc.fixturenames:
        return
    from tests import devices

    if metafunc.definition.get_closest_marker("cpu_semantics"):
        names = ["/CPU:0"]
    elif metafunc.definition.get_closest_marker("every_device"):
        names = devices.device_names()
    else:
        return
    params = []
    not_on_metal = metafunc.definition.get_closest_marker("not_on_metal")
    for n in names:
        marks = []
        if not_on_metal and n != "/CPU:0" and devices.gpu_is_metal():
            marks = [pytest.mark.skip(reason=f"Metal GPU: {not_on_metal.args[0]}")]
        params.append(pytest.param(n, id=devices.device_id(n), marks=marks))
    metafunc.parametrize("tf_device", params, indirect=True)


@pytest.fixture(autouse=True)
def tf_device(request):
    """The device a test's ops are placed on (None: TensorFlow's default)."""
    name = getattr(request, "param", None)
    if name is None:
        yield None
        return
    import tensorflow as tf

    with tf.device(name):
        yield name


def pytest_configure(config):
    # TensorFlow's own matmuls and convolutions on an NVIDIA GPU use TF32 by
    # default (10-bit mantissa); the tests compare this library's float32
    # kernels with them as references, so those run in full float32 here
    # (children inherit it).
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    # Python processes that tests start (sys.executable) import what the tests
    # import: the folders of pytest.ini's `pythonpath`.
    paths = [str(p) for p in config.getini("pythonpath")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    # METAL_OPS_METAL=shim / shim-stream: the strict model of Metal, a test
    # library of the tree, is loaded before any op runs, here and in the
    # processes the tests start (the package does not load it).
    if SOURCE_TREE:
        from tests.metal_shim import model

        if model.load():
            os.environ["PYTHONPATH"] = model.with_autoload(os.environ["PYTHONPATH"])
