"""metal_ops' loader and the CUDA kernels' library (_metal_ops_cuda.so, Linux
wheel): when it is loaded (mocked TensorFlow answers), that nothing CUDA is
loaded in this process's CPU TensorFlow, and what `python -m metal_ops` says."""
import os
import subprocess
import sys

import pytest
import tensorflow as tf

import metal_ops
from metal_ops import __main__ as main_module
from metal_ops import _loader

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
INFO = {"tensorflow_version": tf.__version__, "isa_libraries": {"x86-64-v2": "_metal_ops.x86-64-v2.so"},
        "cuda_library": "_metal_ops_cuda.so", "cuda_archs": {"sass": ["sm_90"], "ptx": ["compute_90"]}}


def never():
    raise AssertionError("asked TensorFlow although the answer did not depend on it")


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A package folder holding a (fake) CUDA library file."""
    (tmp_path / "_metal_ops_cuda.so").write_bytes(b"")
    monkeypatch.setattr(_loader, "PACKAGE_DIR", str(tmp_path))
    return tmp_path


def test_no_cuda_library_in_the_build_asks_tensorflow_nothing():
    info = {k: v for k, v in INFO.items() if not k.startswith("cuda")}
    assert _loader.cuda_decision(info, never, never, env={}) == (False, "this build has no CUDA library")
    assert _loader.cuda_decision(None, never, never, env={})[0] is False


def test_cpu_tensorflow_is_never_asked_for_gpus(pkg):
    load, reason = _loader.cuda_decision(INFO, lambda: False, never, env={})
    assert not load and reason == "the running TensorFlow is not a CUDA build"


def test_cuda_tensorflow_without_a_gpu(pkg):
    load, reason = _loader.cuda_decision(INFO, lambda: True, lambda: [], env={})
    assert not load and reason == "TensorFlow sees no GPU"


def test_cuda_tensorflow_with_a_gpu_loads(pkg):
    load, reason = _loader.cuda_decision(INFO, lambda: True, lambda: ["/physical_device:GPU:0"], env={})
    assert load and "CUDA build" in reason


def test_env_keeps_it_unloaded(pkg):
    load, reason = _loader.cuda_decision(INFO, never, never, env={_loader.CUDA_ENV: "0"})
    assert not load and reason == f"{_loader.CUDA_ENV}=0"


def test_library_named_but_missing(pkg):
    os.remove(pkg / "_metal_ops_cuda.so")
    load, reason = _loader.cuda_decision(INFO, never, never, env={})
    assert not load and "missing" in reason


class FakeTF:
    """The four TensorFlow calls the loader makes, recorded."""

    def __init__(self, cuda, gpus, fail=None, capability=(9, 0)):
        self.calls = []
        self.test = type("T", (), {"is_built_with_cuda": staticmethod(lambda: cuda)})
        details = type("E", (), {"get_device_details": staticmethod(lambda g: {"compute_capability": capability})})
        self.config = type("C", (), {"list_physical_devices": staticmethod(lambda kind: gpus),
                                     "experimental": details})
        self._fail = fail
        self.__version__ = tf.__version__

    def load_library(self, path):
        self.calls.append(path)
        if self._fail:
            raise self._fail


@pytest.fixture
def state(monkeypatch):
    monkeypatch.setattr(_loader, "_cuda_state", {"loaded": None, "reason": "not yet"})
    monkeypatch.delenv(_loader.CUDA_ENV, raising=False)
    return _loader._cuda_state


def test_loads_after_the_op_library_with_a_gpu(pkg, state):
    fake = FakeTF(cuda=True, gpus=["gpu"])
    _loader._load_cuda_library(fake, INFO)
    assert fake.calls == [str(pkg / "_metal_ops_cuda.so")]
    assert state["loaded"] == str(pkg / "_metal_ops_cuda.so")
    info = _loader.cuda_info(INFO)
    assert info["present"] and info["loaded"] and info["archs"] == INFO["cuda_archs"]


def test_not_loaded_on_a_gpu_older_than_its_code(pkg, state):
    fake = FakeTF(cuda=True, gpus=["gpu"], capability=(7, 0))
    _loader._load_cuda_library(fake, INFO)
    assert fake.calls == [] and "compute capability 7.0" in _loader.cuda_info(INFO)["reason"]


@pytest.mark.parametrize("cuda,gpus", [(False, ["gpu"]), (True, [])])
def test_not_loaded_without_cuda_tensorflow_or_gpu(pkg, state, cuda, gpus):
    fake = FakeTF(cuda=cuda, gpus=gpus)
    _loader._load_cuda_library(fake, INFO)
    assert fake.calls == [] and not _loader.cuda_info(INFO)["loaded"]
    assert _loader.cuda_info(INFO)["reason"] in ("the running TensorFlow is not a CUDA build", "TensorFlow sees no GPU")


def test_a_library_that_fails_to_load_is_a_clear_error(pkg, state):
    fake = FakeTF(cuda=True, gpus=["gpu"], fail=tf.errors.NotFoundError(None, None, "undefined symbol: _ZN10tensorflow3FooEv"))
    with pytest.raises(ImportError) as e:
        _loader._load_cuda_library(fake, INFO)
    message = str(e.value)
    assert "_metal_ops_cuda.so" in message and "undefined symbol" in message and f"{_loader.CUDA_ENV}=0" in message


def test_this_process_loads_nothing_cuda():
    """This suite runs tensorflow-cpu (or a machine without a GPU): whatever the
    build holds, no CUDA library of metal_ops is mapped after loading."""
    metal_ops.load_library()
    if tf.test.is_built_with_cuda() and tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow is a CUDA build and sees a GPU: the CUDA library is meant to load here")
    mapped = [p for p in _loader.mapped_files() if os.path.basename(p).startswith("_metal_ops_cuda")]
    assert mapped == []
    assert not _loader.cuda_info()["loaded"]


def test_python_dash_m_reports_the_cuda_library():
    out = subprocess.run([sys.executable, "-m", "metal_ops"], env=ENV, capture_output=True, text=True, check=True)
    report = main_module.report()
    cuda = report["cuda"]
    info = _loader.read_build_info() or {}
    if not info.get("cuda_library"):
        assert cuda["library"] is None
        assert main_module._cuda_line(cuda, report["backends"]) in out.stdout.splitlines()
        assert ("CUDA kernels: built into the op library" if "cuda" in report["backends"]
                else "CUDA kernels: none in this build") in out.stdout
        return
    assert cuda["present"] and not cuda["loaded"], cuda
    assert "CUDA kernels: present, not loaded: " in out.stdout
    assert cuda["reason"] in ("the running TensorFlow is not a CUDA build", "TensorFlow sees no GPU")


def test_driver_older_than_the_librarys_cuda_keeps_it_unloaded(pkg):
    info = dict(INFO, cuda_version="13.0")
    gpu = lambda: ["/physical_device:GPU:0"]  # noqa: E731
    load, reason = _loader.cuda_decision(info, lambda: True, gpu, env={}, driver_version=lambda: 12040)
    assert not load
    assert "supports CUDA 12.4" in reason and "built with CUDA 13.0" in reason and "580 series" in reason
    assert _loader.cuda_decision(info, lambda: True, gpu, env={}, driver_version=lambda: 13000)[0]
    assert _loader.cuda_decision(info, lambda: True, gpu, env={}, driver_version=lambda: None)[0]  # cannot ask: try
    assert _loader.cuda_decision(dict(INFO), lambda: True, gpu, env={}, driver_version=never)[0]  # no version: never asks


def test_cuda12_library_runs_on_every_cuda12_driver(pkg):
    """Minor version compatibility: a CUDA 12.9 build needs a driver for CUDA
    12.0 (525), not 12.9; a CUDA 11 driver keeps it unloaded, naming the floor."""
    info = dict(INFO, cuda_version="12.9")
    gpu = lambda: ["/physical_device:GPU:0"]  # noqa: E731
    assert _loader.cuda_driver_floor("12.9") == 12000 and _loader.cuda_driver_floor("13.0") == 13000
    for driver in (12000, 12040, 12080, 13000):
        assert _loader.cuda_decision(info, lambda: True, gpu, env={}, driver_version=lambda: driver)[0], driver
    load, reason = _loader.cuda_decision(info, lambda: True, gpu, env={}, driver_version=lambda: 11080)
    assert not load
    assert "supports CUDA 11.8" in reason and "CUDA 12.0" in reason and "525 series" in reason


@pytest.mark.parametrize("capability,loads", [((6, 0), False), ((7, 0), False), ((7, 5), False), ((8, 0), True),
                                              ((8, 9), True), ((9, 0), True), ((12, 0), True)])
def test_gpu_older_than_the_librarys_code_keeps_it_unloaded(pkg, capability, loads):
    info = dict(INFO, cuda_version="12.9", cuda_archs={"sass": ["sm_80", "sm_89", "sm_90"], "ptx": ["compute_90"]})
    gpu = lambda: ["/physical_device:GPU:0"]  # noqa: E731
    load, reason = _loader.cuda_decision(info, lambda: True, gpu, env={}, driver_version=lambda: 12040,
                                         capabilities=lambda: [capability])
    assert load is loads, reason
    if not loads:
        assert f"compute capability {capability[0]}.{capability[1]}" in reason and "8.0 and newer" in reason
    assert _loader.lowest_capability(info["cuda_archs"]) == (8, 0)
    assert _loader.lowest_capability({"sass": ["sm_90"], "ptx": ["compute_90"]}) == (9, 0)
    assert _loader.lowest_capability(None) is None
