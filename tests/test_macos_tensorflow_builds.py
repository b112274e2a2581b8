"""The macOS wheel's two op libraries, one per TensorFlow stack: the build info
`make metal-check` writes (tools/build/write_build_info.py --add-build), the library
metal_ops' loader picks for the running TensorFlow, the error for a
TensorFlow no build supports, the wheel's extras with their environment
markers, and the GPU path `python -m metal_ops` reports. No Mac and no
compiled library needed: the build info is written to a temporary package
folder."""
import json
import os
import subprocess
import sys

import pytest

from metal_ops import __main__ as main_module
from metal_ops import _loader, _requirements, fusion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BUILDS = [
    {"tensorflow_version": "2.21.0", "library": "_metal_ops.tf2.21.so",
     "grappler_library": "_metal_ops_grappler.tf2.21.so", "backends": ["cpu", "metal"], "tensorflow_metal": None},
    {"tensorflow_version": "2.19.1", "library": "_metal_ops.tf2.19.so",
     "grappler_library": "_metal_ops_grappler.tf2.19.so", "backends": ["cpu", "metal"], "tensorflow_metal": "1.2.0"},
]
INFO = {"platform": "Darwin-arm64", "backends": ["cpu", "metal"], "tensorflow_builds": BUILDS}


@pytest.fixture
def macos_package(tmp_path, monkeypatch):
    """A package folder holding the macOS wheel's build info and (empty) libraries."""
    (tmp_path / "_build_info.json").write_text(json.dumps(INFO))
    for b in BUILDS:
        (tmp_path / b["library"]).write_bytes(b"")
        (tmp_path / b["grappler_library"]).write_bytes(b"")
    monkeypatch.setattr(_loader, "PACKAGE_DIR", str(tmp_path))
    monkeypatch.setattr(fusion, "PACKAGE_DIR", str(tmp_path))
    # As in a process that has not loaded the library yet (this one may have).
    monkeypatch.setattr(_loader, "_loaded_path", None)
    return tmp_path


@pytest.mark.parametrize("running,library", [("2.21.0", "_metal_ops.tf2.21.so"), ("2.21.3", "_metal_ops.tf2.21.so"),
                                             ("2.19.1", "_metal_ops.tf2.19.so"), ("2.19.0", "_metal_ops.tf2.19.so")])
def test_the_build_of_the_running_tensorflow_is_chosen(macos_package, monkeypatch, running, library):
    monkeypatch.setattr(_loader, "running_tensorflow_version", lambda: running)
    info = _loader.read_build_info()
    assert info["library"] == library and "tensorflow_builds" not in info and info["platform"] == "Darwin-arm64"
    assert _loader.library_path() == os.path.join(str(macos_package), library)
    assert _loader.select_library(info) == (_loader.NATIVE, library)
    grappler = library.replace("_metal_ops.", "_metal_ops_grappler.")
    assert fusion.plugin_path() == os.path.join(str(macos_package), grappler)


@pytest.mark.parametrize("running", ["2.20.0", "2.18.1", "2.22.0", None])
def test_a_tensorflow_no_build_supports_is_one_clear_error(macos_package, monkeypatch, running):
    monkeypatch.setattr(_loader, "running_tensorflow_version", lambda: running)
    info = _loader.read_build_info()
    assert not info.get("library") and info["error"]
    with pytest.raises(ImportError) as e:
        _loader.select_library(info)
    message = str(e.value)
    for part in ("TensorFlow 2.21 (Python 3.10-3.13", "TensorFlow 2.19 + tensorflow-metal 1.2.0 (Python 3.9-3.12",
                 "tf-metal-ops[cpu]", "tf-metal-ops[metal]"):
        assert part in message, (part, message)
    assert (f"TensorFlow {running} is installed" if running else "no TensorFlow is installed") in message
    with pytest.raises(ImportError, match="op libraries for TensorFlow 2.21"):
        _loader.library_path()


def test_check_tensorflow_accepts_the_running_tensorflow_of_either_build(macos_package):
    import tensorflow as tf

    _loader.check_tensorflow()  # this TensorFlow (2.21) has a build
    only_other = dict(INFO, tensorflow_builds=[b for b in BUILDS if not b["tensorflow_version"].startswith(
        tf.__version__.rsplit(".", 1)[0])])
    (macos_package / "_build_info.json").write_text(json.dumps(only_other))
    with pytest.raises(ImportError, match=rf"TensorFlow {tf.__version__} is installed"):
        _loader.check_tensorflow()


def test_python_3_13_without_tensorflow_is_told_metal_is_not_available(monkeypatch):
    monkeypatch.setattr(_loader.sys, "platform", "darwin")
    monkeypatch.setattr(_loader.sys, "version_info", (3, 13, 1, "final", 0))
    with pytest.raises(ImportError) as e:
        _loader.select_tensorflow_build(INFO, None)
    assert "[metal] installs nothing" in str(e.value) and "use [cpu]" in str(e.value)


def test_a_one_build_info_is_left_as_it_is():
    info = {"tensorflow_version": "2.21.0", "library": "_metal_ops.so", "backends": ["cpu"], "platform": "Linux-x86_64"}
    assert _loader.select_tensorflow_build(info, "2.19.1") is info


# ---- tools/build/write_build_info.py --add-build: what metal_check.sh writes ----------------------

def _write(path, **info):
    path.write_text(json.dumps(info))
    return str(path)


@pytest.mark.source_tree("tools/build")
def test_add_build_collects_both_builds_newest_first(tmp_path):
    out = tmp_path / "pkg.json"
    script = [sys.executable, os.path.join(ROOT, "tools", "build", "write_build_info.py")]
    metal = _write(tmp_path / "a.json", tensorflow_version="2.19.1", library="_metal_ops.tf2.19.so",
                   grappler_library="_metal_ops_grappler.tf2.19.so", backends=["cpu", "metal"], platform="Darwin-arm64")
    cpu = _write(tmp_path / "b.json", tensorflow_version="2.21.0", library="_metal_ops.tf2.21.so",
                 grappler_library="_metal_ops_grappler.tf2.21.so", backends=["cpu", "metal"], platform="Darwin-arm64")
    subprocess.run(script + ["--add-build", metal, "--tensorflow-metal", "1.2.0", "--out", str(out)], check=True)
    subprocess.run(script + ["--add-build", cpu, "--out", str(out)], check=True)
    subprocess.run(script + ["--add-build", cpu, "--out", str(out)], check=True)  # replaces, never duplicates
    info = json.loads(out.read_text())
    assert info == INFO


@pytest.mark.source_tree("tools/build")
def test_make_records_the_grappler_plugins_name(tmp_path):
    out = tmp_path / "info.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build", "write_build_info.py"), "--out", str(out),
                    "--backends", "cpu metal", "--tf-version", "2.21.0", "--platform", "Darwin-arm64",
                    "--lib", "pkg/_metal_ops.tf2.21.so", "--grappler-lib", "pkg/_metal_ops_grappler.tf2.21.so"],
                   check=True)
    info = json.loads(out.read_text())
    assert info["library"] == "_metal_ops.tf2.21.so" and info["grappler_library"] == "_metal_ops_grappler.tf2.21.so"


# ---- the extras: which stack each installs, with environment markers -------------------------

def test_macos_extras_name_each_stack_with_markers():
    extras = _requirements.macos_extras(BUILDS)
    assert extras == {
        "cpu": ["tensorflow>=2.21,<2.22; sys_platform == 'darwin' and python_version >= '3.10'",
                "tensorflow>=2.19,<2.20; sys_platform == 'darwin' and python_version < '3.10'"],
        "metal": ["tensorflow>=2.19,<2.20; sys_platform == 'darwin' and python_version >= '3.9' and "
                  "python_version < '3.13'",
                  "tensorflow-metal==1.2.0; sys_platform == 'darwin' and python_version >= '3.9' and "
                  "python_version < '3.13'"],
    }


@pytest.mark.parametrize("python,cpu_tf,metal", [("3.9", "2.19", True), ("3.10", "2.21", True),
                                                 ("3.12", "2.21", True), ("3.13", "2.21", False)])
def test_macos_extras_resolve_per_python(python, cpu_tf, metal):
    from packaging.requirements import Requirement

    env = {"sys_platform": "darwin", "python_version": python}
    extras = _requirements.macos_extras(BUILDS)
    cpu = [Requirement(r) for r in extras["cpu"] if Requirement(r).marker.evaluate(env)]
    assert len(cpu) == 1 and cpu[0].specifier.contains(cpu_tf + ".0")
    chosen = [Requirement(r).name for r in extras["metal"] if Requirement(r).marker.evaluate(env)]
    assert chosen == (["tensorflow", "tensorflow-metal"] if metal else [])
    linux = {"sys_platform": "linux", "python_version": python}
    assert not any(Requirement(r).marker.evaluate(linux) for reqs in extras.values() for r in reqs)


@pytest.mark.source_tree("setup.py")
def test_setup_py_gives_the_macos_wheel_the_stack_extras(tmp_path, monkeypatch):
    import importlib.util

    (tmp_path / "_build_info.json").write_text(json.dumps(INFO))
    monkeypatch.setenv("METAL_OPS_PREBUILT", str(tmp_path))
    spec = importlib.util.spec_from_file_location("metal_ops_setup", os.path.join(ROOT, "setup.py"))
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)
    extras = setup_py._extras()
    assert extras["cpu"] == _requirements.macos_extras(BUILDS)["cpu"]
    assert extras["metal"] == _requirements.macos_extras(BUILDS)["metal"]


# ---- python -m metal_ops: the GPU path ---------------------------------------------------------

METAL_INFO = {"backends": ["cpu", "metal"]}


@pytest.mark.parametrize("tf_version,tf_metal,env,name,reason", [
    ("2.19.1", "1.2.0", {}, "tensorflow-metal", "TF_MetalStream"),
    ("2.19.1", "1.2.0", {"METAL_OPS_METAL": "0"}, "none", "METAL_OPS_METAL=0"),
    ("2.21.0", "1.2.0", {}, "none", "does not load with TensorFlow 2.21.0"),
    ("2.21.0", None, {}, "none", "without tensorflow-metal has no GPU device"),
    ("2.21.0", None, {"METAL_OPS_METAL": "1"}, "none", "own Metal queue, which this build does not have"),
])
def test_derived_gpu_path_on_a_mac(tf_version, tf_metal, env, name, reason):
    got = main_module.derive_metal_path(METAL_INFO, tf_version, tf_metal, platform="darwin", env=env)
    assert got[0] == name and reason in got[1], got


def test_derived_gpu_path_off_a_mac():
    assert main_module.derive_metal_path({"backends": ["cpu"]}, "2.21.0", None, platform="linux", env={}) == \
        ("none", "not macOS: no Apple GPU")
    name, reason = main_module.derive_metal_path({"backends": ["cpu"]}, "2.21.0", None, platform="linux",
                                                 env={"METAL_OPS_METAL": "shim"})
    assert name == "none" and "model of Metal" in reason
    assert main_module.derive_metal_path({"backends": ["cpu"]}, "2.19.1", "1.2.0", platform="darwin", env={}) == \
        ("none", "this build has no Metal kernels")


def test_gpu_path_uses_the_metal_path_module_where_the_package_has_it(monkeypatch):
    import importlib.util
    import types

    module = types.ModuleType("metal_ops.metal_path")
    module.active_metal_path = lambda: ("shim", "METAL_OPS_METAL=shim")
    monkeypatch.setitem(sys.modules, "metal_ops.metal_path", module)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(main_module.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "metal_ops.metal_path" else real_find_spec(name, *a))
    assert main_module.metal_path(METAL_INFO, "2.21.0") == ("shim", "METAL_OPS_METAL=shim")


# ---- tools/check/macos_checks/wheel.py: the wheel's metadata names a build per TensorFlow checked ------

def _wheel(tmp_path, info):
    import zipfile

    path = tmp_path / "tf_metal_ops-0-py3-none-macosx_12_0_arm64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tf_metal_ops-0.dist-info/WHEEL", "Root-Is-Purelib: false\nTag: py3-none-macosx_12_0_arm64\n")
        z.writestr("metal_ops/_build_info.json", json.dumps(info))
    return zipfile.ZipFile(path)


@pytest.mark.source_tree("tools/check")
def test_wheel_check_wants_one_checked_tensorflow_per_build(tmp_path):
    from tools.check.macos_checks import wheel

    tag = "py3-none-macosx_12_0_arm64"
    sites = {"2.21.0": "a", "2.19.1": "b"}
    with _wheel(tmp_path, INFO) as z:
        problems, builds = wheel.metadata_problems(z, z.namelist(), tag, sites)
        assert problems == [] and builds == BUILDS
        problems, _ = wheel.metadata_problems(z, z.namelist(), tag, {"2.21.0": "a"})
        assert problems == ["built against TensorFlow 2.19.1, 2.21.0, checked against 2.21.0"]
    one = {"tensorflow_version": "2.19.1", "library": "_metal_ops.so", "backends": ["cpu", "metal"],
           "platform": "Darwin-arm64"}
    with _wheel(tmp_path, one) as z:
        problems, _ = wheel.metadata_problems(z, z.namelist(), tag, {"2.19.1": "b"})
        assert any("want platform Darwin-arm64 with tensorflow_builds" in p for p in problems)
