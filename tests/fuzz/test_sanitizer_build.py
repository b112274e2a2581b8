"""Under `make asan-test` (METAL_OPS_EXPECT_ASAN=1): the op library this
process loaded is the sanitizer build and the ASan runtime is in the process,
so the run cannot silently test the regular build; and its verdict
(tools/check/sanitizer_reports.py) fails on a planted heap overflow, not on the MSL
shim's fibers."""
import os
import subprocess
import sys

import pytest

import metal_ops
from metal_ops import _loader

pytestmark = [pytest.mark.source_tree("the ASan build (make asan-test)"),
              pytest.mark.skipif(os.environ.get("METAL_OPS_EXPECT_ASAN") != "1",
                                 reason="checks the sanitizer build; runs under `make asan-test` only")]


def test_loaded_library_is_instrumented():
    metal_ops.load_library()
    path = _loader.library_path()
    assert os.sep + os.path.join("asan", "python", "metal_ops") + os.sep in path, path
    with open(path, "rb") as f:
        data = f.read()
    assert b"__asan_report_load" in data and b"__ubsan_handle" in data, "not built with -fsanitize=address,undefined"
    assert os.path.realpath(path) in {os.path.realpath(p) for p in _loader.mapped_files()}


def test_sanitizer_runtimes_are_preloaded():
    names = {os.path.basename(p) for p in _loader.mapped_files()}
    assert any(n.startswith("libasan.so") for n in names), sorted(names)
    assert any(n.startswith("libubsan.so") for n in names), sorted(names)


# ---- the verdict on the reports (tools/check/sanitizer_reports.py, what the target exits with) ----------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLANTED = """
#include <stdlib.h>
/* Writes one int past a heap block of n. */
extern "C" int planted_heap_overflow(int n) {
  int* p = (int*)malloc(sizeof(int) * n);
  volatile int i = n;
  p[i] = 1;
  int first = p[0];
  free(p);
  return first;
}
"""


def run_reporting(tmp_path, code, *args):
    """Runs `code` in a Python with this run's sanitizer runtimes (LD_PRELOAD
    is inherited) and its reports in tmp_path/reports; returns (the process,
    the verdict of tools/check/sanitizer_reports.py on them)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    env = dict(os.environ, ASAN_OPTIONS=f"detect_leaks=0:abort_on_error=1:log_path={reports}/asan")
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    verdict = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check", "sanitizer_reports.py"), str(reports)],
                             capture_output=True, text=True, timeout=60)
    return done, verdict, sorted(os.listdir(reports))


def test_a_planted_heap_overflow_fails_the_run(tmp_path):
    src, lib = tmp_path / "planted.cc", tmp_path / "libplanted.so"
    src.write_text(PLANTED)
    subprocess.run(["g++", "-fsanitize=address", "-fPIC", "-shared", "-O1", "-g", "-o", str(lib), str(src)],
                   check=True, timeout=300)
    code = "import ctypes, sys; ctypes.CDLL(sys.argv[1]).planted_heap_overflow(4)"
    done, verdict, files = run_reporting(tmp_path, code, str(lib))
    assert done.returncode != 0 and files, (done.returncode, files)
    assert verdict.returncode == 1, verdict.stdout
    assert "heap-buffer-overflow" in verdict.stdout


def test_the_shims_fibers_pass_the_run(tmp_path):
    """The instrumented MSL shim announces its stack switches to ASan and
    switches without swapcontext: its fibers run without a report."""
    from tests.metal_shim.shim import SHIM_PATH

    with open(SHIM_PATH, "rb") as f:
        data = f.read()
    assert b"__asan_report_load" in data, f"{SHIM_PATH} is not built with -fsanitize=address"
    assert b"__sanitizer_start_switch_fiber" in data
    code = ("import ctypes, sys\n"
            "lib = ctypes.CDLL(sys.argv[1])\n"
            "m = [(ctypes.c_float * 64)(*([1.0] * 64)) for _ in range(4)]\n"
            "for _ in range(3):  # the fibers' stacks are used again\n"
            "    m[3][:] = [0.0] * 64\n"
            "    assert lib.shim_simdgroup_multiply(m[0], m[1], m[2], m[3], 8, 0, 0, 0) == 0\n"
            "    assert list(m[3]) == [9.0] * 64\n")
    done, verdict, files = run_reporting(tmp_path, code, SHIM_PATH)
    assert done.returncode == 0, done.stderr
    assert files == [] and verdict.returncode == 0, verdict.stdout
