"""kernels/framework/x86_intrinsics.h: GCC's false (maybe-)uninitialized warnings inside
the AVX-512 intrinsics are silenced (the per-level wheel builds use -Werror at
-march=x86-64-v4), while the same warnings in our own code still fail."""
import os
import platform
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.source_tree("kernels/ and a compiler")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def why_not_runnable(cxx, machine=None):
    """Why these tests cannot run with compiler `cxx` on this machine, or None:
    they need an x86-64 machine and a compiler that accepts -march=x86-64-v4
    (an Apple-silicon Mac's `g++` is Apple's clang for arm64, which rejects it)."""
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return f"needs an x86-64 machine (this is {machine})"
    if cxx is None:
        return "needs g++"
    probe = subprocess.run([cxx, "-march=x86-64-v4", "-x", "c++", "-c", "-o", os.devnull, "-"],
                           input="int f() { return 0; }\n", capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{cxx} does not accept -march=x86-64-v4: {probe.stderr.strip()[:200]}"
    return None


CXX = shutil.which("g++")
WHY_NOT = why_not_runnable(CXX)
needs_v4 = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

INTRINSIC = "__m512 g(__m512 a) { return _mm512_sqrt_ps(a); }\n"
OURS = "int f(int c, int d) { int x; if (c > 3) x = d * 7; return x + c; }\n"


def compile_(tmp_path, source):
    path = tmp_path / "t.cc"
    path.write_text(source)
    return subprocess.run([CXX, "-std=c++17", "-O2", "-march=x86-64-v4", "-Wall", "-Werror", "-I", ROOT, "-c",
                           str(path), "-o", os.devnull], capture_output=True, text=True)


@needs_v4
def test_intrinsics_compile_clean_through_the_header(tmp_path):
    out = compile_(tmp_path, '#include "kernels/framework/x86_intrinsics.h"\n' + INTRINSIC)
    assert out.returncode == 0, out.stderr[-2000:]


@needs_v4
def test_the_header_is_what_silences_them(tmp_path):
    out = compile_(tmp_path, "#include <immintrin.h>\n" + INTRINSIC)
    if out.returncode == 0:
        pytest.skip(f"this g++ ({CXX}) has no false positive in its AVX-512 intrinsics (GCC bug 105593 fixed)")
    assert "uninitialized" in out.stderr and "avx512fintrin.h" in out.stderr


@needs_v4
def test_our_own_uninitialized_use_still_fails(tmp_path):
    out = compile_(tmp_path, '#include "kernels/framework/x86_intrinsics.h"\n' + INTRINSIC + OURS)
    assert out.returncode != 0 and "t.cc" in out.stderr and "uninitialized" in out.stderr


# ---- when they run: not on an arm64 Mac, whose `g++` (Apple's clang) rejects -march=x86-64-v4 ----

def test_arm64_machines_skip():
    assert "x86-64 machine" in why_not_runnable(CXX or "g++", machine="arm64")
    assert "x86-64 machine" in why_not_runnable(CXX or "g++", machine="aarch64")


def test_a_compiler_rejecting_x86_64_v4_skips(tmp_path):
    # What Apple's clang for arm64 answers: "unsupported argument 'x86-64-v4' to option '-march='".
    fake = tmp_path / "g++"
    fake.write_text("#!/bin/sh\necho \"clang: error: unsupported argument 'x86-64-v4' to option '-march='\" >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    why = why_not_runnable(str(fake), machine="x86_64")
    assert why is not None and "does not accept -march=x86-64-v4" in why and "unsupported argument" in why
    assert why_not_runnable(None, machine="x86_64") == "needs g++"
