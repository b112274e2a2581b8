"""setuptools hook for `pip install .`: compiles the op library with the Makefile.

Metadata lives in pyproject.toml. This file adds one thing: `build_py` runs

    make all PYTHON=<this interpreter> PKG=<wheel tree>/metal_ops BUILD=<temp dir> -o <venv stamp>

so the wheel gets _metal_ops.so, _build_info.json and whatever else `make all`
puts in the package directory (the Grappler plugin, the
CUDA kernels when the TensorFlow in the build environment is a CUDA build and
nvcc is on PATH), compiled with the same rules as `make`. `-o` marks the
Makefile's venv stamp as up to date, so make neither creates .venv nor
pip-installs anything: the build environment's TensorFlow is used as it is.
The source tree's python/metal_ops/_metal_ops.so (a developer's `make`) is
neither read nor overwritten.

The wheel requires the TensorFlow distribution and minor version that it was
compiled against (C++ custom ops bind to one TensorFlow minor version).

Environment: METAL_OPS_SKIP_MAKE=1 (editable installs only: compile
nothing, as the Makefile's venv rule does before `make` builds in place),
METAL_OPS_MAKE (default `make`), METAL_OPS_BUILD_JOBS (default:
the number of CPUs), METAL_OPS_MAKE_ARGS (extra make arguments, e.g.
`OPT=-O3` to drop -march=native for a portable wheel).
"""
import os
import shlex
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))

# pip names of TensorFlow builds, most specific first.
_TF_DISTRIBUTIONS = (
    "tensorflow-cpu",
    "tensorflow-macos",
    "tensorflow-intel",
    "tensorflow-gpu",
    "tensorflow",
)


def _tensorflow_requirement():
    """`<distribution>>=X.Y,<X.Y+1` for the TensorFlow in this environment."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return []
    for dist in _TF_DISTRIBUTIONS:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        major, minor = (int(p) for p in version.split(".")[:2])
        return [f"{dist}>={major}.{minor},<{major}.{minor + 1}"]
    # Metadata-only queries (e.g. `pip install` resolving before building) may
    # run without TensorFlow; the build itself needs it and fails clearly then.
    return []


def make_command(pkg_dir, build_dir, python=sys.executable):
    """The `make` command line that builds the package's compiled files into
    pkg_dir (objects under build_dir) with `python`'s TensorFlow."""
    make = os.environ.get("METAL_OPS_MAKE", "make")
    jobs = os.environ.get("METAL_OPS_BUILD_JOBS", str(min(os.cpu_count() or 1, 8)))
    venv = os.path.join(build_dir, "no-venv")
    return [
        make, "-C", ROOT, "all", f"-j{jobs}",
        f"PYTHON={python}",
        f"VENV={venv}",
        "-o", f"{venv}/.installed",
        f"PKG={pkg_dir}",
        f"BUILD={build_dir}",
    ] + shlex.split(os.environ.get("METAL_OPS_MAKE_ARGS", ""))


def _run_make(pkg_dir, build_dir):
    cmd = make_command(pkg_dir, build_dir)
    make = cmd[0]
    print("metal_ops: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    try:
        subprocess.check_call(cmd, cwd=ROOT)
    except FileNotFoundError:
        raise SystemExit(f"metal_ops: `{make}` not found: building the op library needs make and a C++17 compiler")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"metal_ops: building the op library failed (make exited {e.returncode}); see the output above")
    lib = os.path.join(pkg_dir, "_metal_ops.so")
    if not os.path.exists(lib):
        raise SystemExit(f"metal_ops: make finished but {lib} is missing")


class BuildPyWithOps(build_py):
    """build_py, then compile the op library into the package being built."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # `pip install -e .`: the package is the source tree; build in place
            # (the same as `make`, with this interpreter's TensorFlow), unless
            # the Makefile's venv rule installs it (`make` then builds in place).
            if os.environ.get("METAL_OPS_SKIP_MAKE") == "1":
                return
            pkg_dir = os.path.join(ROOT, "python", "metal_ops")
            build_dir = os.path.join(ROOT, "build", "pip-editable")
        else:
            pkg_dir = os.path.join(os.path.abspath(self.build_lib), "metal_ops")
            build_temp = self.get_finalized_command("build").build_temp
            build_dir = os.path.join(os.path.abspath(build_temp), "metal_ops_make")
        os.makedirs(pkg_dir, exist_ok=True)
        _run_make(pkg_dir, build_dir)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        pkg_dir = os.path.join(self.build_lib, "metal_ops")
        if os.path.isdir(pkg_dir):
            for name in sorted(os.listdir(pkg_dir)):
                if name.endswith((".so", ".dylib")) or name == "_build_info.json":
                    outputs.append(os.path.join(pkg_dir, name))
        return outputs


class BinaryDistribution(Distribution):
    """The wheel holds compiled code: tag it for this platform and Python."""

    def has_ext_modules(self):
        return True


def _readme():
    path = os.path.join(ROOT, "README.md")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return "TensorFlow custom ops for neural-graphics training (CPU, CUDA, Metal)."


# setuptools runs this file as __main__ (pip, `python setup.py`); tests import
# it as a module to check make_command() and _tensorflow_requirement().
if __name__ == "__main__":
    setup(
        cmdclass={"build_py": BuildPyWithOps},
        distclass=BinaryDistribution,
        install_requires=["numpy"] + _tensorflow_requirement(),
        long_description=_readme(),
        long_description_content_type="text/markdown",
    )
