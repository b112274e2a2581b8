"""The Linux wheel's libraries stay within TensorFlow's manylinux policy.

The wheel's libraries are the same objects as this build's, linked with
runtime/libstdcxx_compat.cc (PORTABLE=1), which binds the few C/C++ runtime
symbols a newer toolchain versions above the policy to older ones. Every such
symbol the library built here imports must be one that file defines: otherwise
`make wheels` (auditwheel, tools/check/wheel_check.py) refuses the wheel, which
this finds in seconds instead.
"""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "python", "metal_ops")
# TensorFlow's Linux wheel, manylinux_2_27: glibc 2.27 and the libstdc++ of GCC 7-8.
POLICY = {"GLIBC": (2, 27), "GLIBCXX": (3, 4, 22), "CXXABI": (1, 3, 11)}
LIBS = ["_metal_ops.so", "_metal_ops_grappler.so"]

pytestmark = [pytest.mark.source_tree("runtime/libstdcxx_compat.cc and the in-tree library"),
              pytest.mark.skipif(not (shutil.which("objdump") and shutil.which("nm") and shutil.which("g++"))
                                 or os.uname().sysname != "Linux", reason="needs Linux binutils and g++")]


def above_policy(lib):
    """{symbol: version} of the versioned undefined symbols above POLICY."""
    out = subprocess.run(["objdump", "-T", lib], check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.search(r"\*UND\*\s+\S+\s+\(?(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\)?\s+(\S+)$", line)
        if m and tuple(int(p) for p in m.group(2).split(".")) > POLICY[m.group(1)]:
            found[m.group(3)] = f"{m.group(1)}_{m.group(2)}"
    return found


@pytest.fixture(scope="module")
def compat_defines(tmp_path_factory):
    obj = tmp_path_factory.mktemp("compat") / "compat.o"
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-c", os.path.join(ROOT, "runtime", "libstdcxx_compat.cc"),
                    "-o", str(obj)], check=True)
    out = subprocess.run(["nm", "--defined-only", str(obj)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("name", LIBS)
def test_symbols_above_policy_are_bound_by_the_compat_file(name, compat_defines):
    lib = os.path.join(PKG, name)
    if not os.path.exists(lib):
        pytest.skip(f"{name} not built")
    import tensorflow as tf
    if tf.test.is_built_with_cuda():
        # Built against TensorFlow's CUDA build, the library holds the CUDA
        # glue, which the wheel ships in a library of its own
        # (tools/check/cuda_lib_check.py checks that one).
        pytest.skip("a build against TensorFlow's CUDA build is not the wheel's CPU library")
    missing = {sym: ver for sym, ver in above_policy(lib).items() if sym not in compat_defines}
    assert not missing, (
        f"{name} imports symbols above manylinux_2_27 that runtime/libstdcxx_compat.cc does not bind "
        f"(the wheel would fail auditwheel): {missing}")
