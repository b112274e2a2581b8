"""The metal_ops package: loader, build_info, version check, `python -m metal_ops`."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

import metal_ops
from metal_ops import _loader
from tests.child_env import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def test_build_info_reports_cpu_backend():
    info = metal_ops.build_info()
    assert info["built"]
    assert "cpu" in info["backends"]
    assert info["tensorflow_built_against"] == tf.__version__
    assert os.path.exists(info["paths"]["op_library"])


def test_python_dash_m_prints_build_info():
    out = subprocess.run([sys.executable, "-m", "metal_ops", "--json"], env=ENV, capture_output=True, text=True,
                         check=True)
    info = json.loads(out.stdout)
    assert "cpu" in info["backends"] and info["tensorflow_running"] == tf.__version__


def test_loading_twice_returns_same_module():
    assert metal_ops.load_library() is metal_ops.load_library()


def test_concurrent_first_load_is_safe():
    code = (
        "import threading, metal_ops\n"
        "mods = []\n"
        "ts = [threading.Thread(target=lambda: mods.append(metal_ops.load_library())) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "assert len(mods) == 8 and all(m is mods[0] for m in mods)\n"
        "print(int(metal_ops.zero_out([1, 2])[0]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_import_loads_the_library_where_it_has_xla_kernels():
    """XLA takes op kernels in at TensorFlow's first op: `import metal_ops`
    loads the library where it has XLA kernels (docs/XLA.md), else lazily."""
    code = "import metal_ops, metal_ops._loader as l; print(l._module is None)"
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(not _loader.builds_xla_kernels())


def test_version_mismatch_message_is_precise():
    with pytest.raises(ImportError, match=r"built against TensorFlow 2\.20\.1 but TensorFlow 2\.21\.0 is running.*"
                                          r"pip install 'tensorflow[-a-z]*>=2\.20,<2\.21'.*make clean && make"):
        _loader.check_tensorflow_version("2.20.1", "2.21.0")
    _loader.check_tensorflow_version("2.21.0", "2.21.3")  # patch releases are compatible


def test_import_with_another_tensorflow_is_one_clear_error(tmp_path):
    """A package built for another TensorFlow minor version: `import metal_ops`
    fails before loading anything, naming both versions and what to install."""
    pkg = tmp_path / "metal_ops"
    pkg.mkdir()
    for name in os.listdir(_loader.PACKAGE_DIR):
        if name.endswith(".py"):
            shutil.copy(os.path.join(_loader.PACKAGE_DIR, name), pkg / name)
    (pkg / "_build_info.json").write_text(json.dumps(
        {"tensorflow_version": "2.17.1", "backends": ["cpu"], "platform": "Linux-x86_64", "library": "_metal_ops.so"}))
    env = dict(ENV, PYTHONPATH=child_env(pythonpath=[tmp_path])["PYTHONPATH"])
    out = subprocess.run([sys.executable, "-c", "import metal_ops"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: metal_ops was built against TensorFlow 2.17.1 but TensorFlow "
                           f"{tf.__version__} is running"), out.stderr
    assert "pip install 'tensorflow" in last and ">=2.17,<2.18'" in last, last
    assert "undefined symbol" not in out.stderr


def test_missing_library_says_to_run_make(tmp_path, monkeypatch):
    monkeypatch.setattr(_loader, "PACKAGE_DIR", str(tmp_path))
    monkeypatch.setattr(_loader, "_module", None)
    with pytest.raises(ImportError, match="`make`"):
        _loader.load_library()


@pytest.mark.source_tree("pyproject.toml")
def test_the_wheel_takes_in_the_selftest_references():
    """The packages pyproject.toml's [tool.setuptools.packages.find] puts in the
    wheel include metal_ops._reference, with every op's reference: what the
    self-test checks the CPU kernels against on a machine without a GPU."""
    import tomllib

    import setuptools

    from metal_ops import _reference

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
    where = os.path.join(ROOT, *find["where"])
    assert "metal_ops._reference" in setuptools.find_packages(where, include=find["include"])
    assert os.path.samefile(os.path.dirname(_reference.__file__), os.path.join(where, "metal_ops", "_reference"))
    assert {f"{op}.py" for op in _reference.OPS} <= set(os.listdir(os.path.dirname(_reference.__file__)))


def test_the_package_holds_no_path_into_the_source_tree():
    """The model of Metal and its library are the test harness's
    (tests/metal_shim/model.py): no module of the package names them."""
    package = os.path.dirname(os.path.abspath(metal_ops.__file__))
    for folder, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    text = f.read()
                for word in ("libmetal_ops_shim_exec", "METAL_OPS_SHIM_EXEC_LIB", "metal_ops_model_counters"):
                    assert word not in text, f"{name} names {word}"
