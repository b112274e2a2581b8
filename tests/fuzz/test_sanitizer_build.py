"""Under `make asan-test` (METAL_OPS_EXPECT_ASAN=1): the op library this
process loaded is the sanitizer build and the ASan runtime is in the process,
so the run cannot silently test the regular build."""
import os

import pytest

import metal_ops
from metal_ops import _loader

pytestmark = pytest.mark.skipif(os.environ.get("METAL_OPS_EXPECT_ASAN") != "1",
                                reason="checks the sanitizer build; runs under `make asan-test` only")


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
