"""Runtime ISA dispatch of the Linux wheel (metal_ops/_loader.py): one op
library per x86-64 level, the highest the CPU runs loaded, METAL_OPS_ISA to
force one, a level the CPU lacks refused with the missing flags named.

The selection is checked on made-up build infos and CPU flag sets; the last
tests check the library this process really loaded (in the wheel test,
tools/check/wheel_test.sh, at every level this CPU runs)."""
import json
import os
import subprocess
import sys

import pytest

from metal_ops import _loader

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
WHEEL_INFO = {"tensorflow_version": "2.21.0", "isa_libraries": {
    level: f"_metal_ops.{level}.so" for level in ("x86-64-v2", "x86-64-v3", "x86-64-v4")}}
V2 = set(_loader.ISA_LEVEL_FLAGS["x86-64-v2"])
V3 = V2 | set(_loader.ISA_LEVEL_FLAGS["x86-64-v3"])
V4 = V3 | set(_loader.ISA_LEVEL_FLAGS["x86-64-v4"])


@pytest.mark.parametrize("flags,level", [(V2, "x86-64-v2"), (V3, "x86-64-v3"), (V4, "x86-64-v4"),
                                         (V4 - {"avx2"}, "x86-64-v2"), (V3 | {"avx512f"}, "x86-64-v3")])
def test_the_highest_level_the_cpu_runs_is_chosen(flags, level):
    assert _loader.select_library(WHEEL_INFO, env={}, flags=flags) == (level, f"_metal_ops.{level}.so")


def test_a_forced_level_is_used_when_the_cpu_has_it():
    assert _loader.select_library(WHEEL_INFO, env={"METAL_OPS_ISA": "x86-64-v2"}, flags=V4)[0] == "x86-64-v2"


def test_a_forced_level_the_cpu_lacks_is_refused_with_the_missing_flags():
    with pytest.raises(ImportError, match=r"METAL_OPS_ISA=x86-64-v4 asks for instructions this CPU lacks "
                                          r"\(missing CPU flags: avx512f, avx512bw.*it runs x86-64-v2, x86-64-v3"):
        _loader.select_library(WHEEL_INFO, env={"METAL_OPS_ISA": "x86-64-v4"}, flags=V3)


def test_an_unknown_level_lists_the_choices():
    with pytest.raises(ImportError, match=r"METAL_OPS_ISA=avx2 is not a level.*x86-64-v2, x86-64-v3, x86-64-v4"):
        _loader.select_library(WHEEL_INFO, env={"METAL_OPS_ISA": "avx2"}, flags=V4)


def test_a_cpu_below_the_baseline_is_told_to_build_from_source():
    with pytest.raises(ImportError, match=r"lacks .*sse4_2.*x86-64-v2.*from source"):
        _loader.select_library(WHEEL_INFO, env={}, flags=V2 - {"sse4_2"})


def test_unknown_cpu_flags_fall_back_to_the_baseline(monkeypatch):
    monkeypatch.setattr(_loader, "cpu_flags", lambda: None)
    assert _loader.select_library(WHEEL_INFO, env={})[0] == "x86-64-v2"


def test_a_source_build_loads_its_native_library_unless_told_otherwise():
    tree = {"tensorflow_version": "2.21.0", "library": "_metal_ops.so"}
    assert _loader.select_library(tree, env={}, flags=V3) == ("native", "_metal_ops.so")
    with pytest.raises(ImportError, match=r"no per-level libraries \(`make isa-libs`"):
        _loader.select_library(tree, env={"METAL_OPS_ISA": "x86-64-v3"}, flags=V3)
    both = dict(tree, **WHEEL_INFO)
    assert _loader.select_library(both, env={"METAL_OPS_ISA": "x86-64-v3"}, flags=V3)[0] == "x86-64-v3"
    assert _loader.select_library(both, env={"METAL_OPS_ISA": "native"}, flags=V3)[0] == "native"


def test_cpu_flags_of_this_machine_are_read():
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    flags = _loader.cpu_flags()
    assert flags and ("fpu" in flags or "fp" in flags), flags


# ---- what this process and `python -m metal_ops` really run -------------------------------

def test_the_selected_library_is_the_one_loaded():
    import metal_ops

    info = _loader.read_build_info()
    level, name = _loader.select_library(info)
    metal_ops.load_library()
    path = _loader.library_path()
    assert os.path.basename(path) == name
    if os.path.exists("/proc/self/maps"):
        assert os.path.realpath(path) in {os.path.realpath(p) for p in _loader.mapped_files()}
    forced = os.environ.get("METAL_OPS_ISA")
    if forced:
        assert level == forced


def test_python_dash_m_reports_the_level():
    out = subprocess.run([sys.executable, "-m", "metal_ops", "--json"], env=ENV, capture_output=True, text=True,
                         check=True)
    isa = json.loads(out.stdout)["isa"]
    info = _loader.read_build_info()
    assert isa["running"] == _loader.select_library(info)[0]
    summary = subprocess.run([sys.executable, "-m", "metal_ops"], env=ENV, capture_output=True, text=True, check=True)
    assert f"CPU kernels: {isa['running']} (" in summary.stdout


def test_forcing_a_level_this_cpu_lacks_fails_cleanly():
    info = _loader.read_build_info()
    cpu = _loader.cpu_isa_levels()
    lacking = [level for level in (info.get("isa_libraries") or {}) if level not in cpu]
    if not lacking or not cpu:
        pytest.skip("this build has no per-level library above what this CPU runs "
                    "(the wheel has; `make isa-libs` builds them in the tree)")
    env = dict(ENV, METAL_OPS_ISA=lacking[-1])
    out = subprocess.run([sys.executable, "-c", "import metal_ops; metal_ops.zero_out([1, 2])"], env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert f"METAL_OPS_ISA={lacking[-1]} asks for instructions this CPU lacks" in out.stderr, out.stderr
    assert "Illegal instruction" not in out.stderr and out.returncode > 0
