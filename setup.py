"""setuptools hook for `pip install .` and `make wheels`: the op library comes
from the Makefile.

Metadata lives in pyproject.toml. This file adds:

- `build_py` runs

      make all PYTHON=<this interpreter> PKG=<wheel tree>/metal_ops BUILD=<temp dir> -o <venv stamp>

  so the wheel gets _metal_ops.so, _build_info.json and whatever else `make all`
  puts in the package directory (the Grappler plugin, the CUDA kernels when the
  TensorFlow in the build environment is a CUDA build and nvcc is on PATH),
  compiled with the same rules as `make`. `-o` marks the Makefile's venv stamp
  as up to date, so make neither creates .venv nor pip-installs anything: the
  build environment's TensorFlow is used as it is. The source tree's
  python/metal_ops/_metal_ops.so (a developer's `make`) is neither read nor
  overwritten. With METAL_OPS_PREBUILT=<dir> it compiles nothing and takes the
  compiled files from <dir> instead (`make wheels`: the per-ISA libraries of
  `make isa-libs`, the macOS libraries of `make metal-check`).
- The tag `py3-none-<platform>`: the libraries call no Python C API, so one
  wheel serves every CPython (METAL_OPS_WHEEL_PLATFORM overrides the platform,
  e.g. macosx_12_0_arm64 for the cross-built macOS wheel).
- Dependencies: numpy and the scipy-openblas32 release the library linked (the
  fused convolution's GEMM; found at run time through an rpath to
  site-packages/scipy_openblas32/lib). No TensorFlow requirement (it would make
  pip install a second TensorFlow beside a user's `tensorflow`, `tensorflow-cpu`
  or `tensorflow[and-cuda]`: metal_ops/_requirements.py); extras name the usual
  one, pinned to the minor version the library was built against
  (`tf-metal-ops[cpu]`, `[and-cuda]` on Linux), and `import metal_ops` checks
  the running version. The macOS wheel holds a library per TensorFlow stack
  (build info "tensorflow_builds"): `[cpu]` installs TensorFlow 2.21 (Python
  3.10-3.13), `[metal]` TensorFlow 2.19 + tensorflow-metal 1.2.0 (Python
  3.9-3.12), with environment markers (_requirements.macos_extras).

Environment: METAL_OPS_SKIP_MAKE=1 (editable installs only: compile
nothing, as the Makefile's venv rule does before `make` builds in place),
METAL_OPS_MAKE (default `make`), METAL_OPS_BUILD_JOBS (default:
the number of CPUs), METAL_OPS_MAKE_ARGS (extra make arguments),
METAL_OPS_PREBUILT, METAL_OPS_WHEEL_PLATFORM (above).
"""
import json
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))

def _load_requirements_module():
    """python/metal_ops/_requirements.py, loaded by path (standard library only)."""
    import importlib.util

    path = os.path.join(ROOT, "python", "metal_ops", "_requirements.py")
    spec = importlib.util.spec_from_file_location("metal_ops_requirements", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_requirements = _load_requirements_module()


def _prebuilt_dir():
    path = os.environ.get("METAL_OPS_PREBUILT")
    return os.path.abspath(path) if path else None


def _prebuilt_info():
    prebuilt = _prebuilt_dir()
    if not prebuilt:
        return None
    with open(os.path.join(prebuilt, "_build_info.json")) as f:
        return json.load(f)


def _target():
    """(TensorFlow version, platform) the wheel's library is built for: from the
    prebuilt build info, else the TensorFlow of this environment; None when
    neither is known (metadata-only queries may run without TensorFlow)."""
    info = _prebuilt_info()
    if info is not None:
        return info["tensorflow_version"], info["platform"]
    installed = _requirements.installed_tensorflow_distribution()
    if installed is None:
        return None
    import platform

    return installed[1], f"{platform.system()}-{platform.machine()}"


def _pin(requirements_file, name):
    """The version `name==X` pins in one of the requirements files, or None."""
    path = os.path.join(ROOT, requirements_file)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.split("#")[0].strip().startswith(f"{name}=="):
                return line.split("==", 1)[1].split()[0]
    return None


def _extras():
    extras = {"test": ["pytest", "hypothesis", "mpmath"]}
    info = _prebuilt_info()
    if info is not None and info.get("tensorflow_builds"):
        # The macOS wheel: one library per TensorFlow stack, an extra per stack.
        extras.update(_requirements.macos_extras(info["tensorflow_builds"]))
        return extras
    target = _target()
    if target is not None:
        extras.update(_requirements.extras(*target, metal_version=_pin("requirements-macos-metal.txt", "tensorflow-metal")))
    return extras


def _openblas_requirement():
    """`scipy-openblas32==X` for the OpenBLAS this build links (requirements.txt's pin)."""
    from importlib import metadata

    try:
        return [f"scipy-openblas32=={metadata.version('scipy-openblas32')}"]
    except metadata.PackageNotFoundError:
        # As for TensorFlow: metadata-only queries may run without it.
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


# The compiled files a package directory gets from `make` (or a prebuilt dir).
def _is_compiled(name):
    return name.endswith((".so", ".dylib")) or name == "_build_info.json"


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
            _run_make(pkg_dir, build_dir)
            return
        pkg_dir = os.path.join(os.path.abspath(self.build_lib), "metal_ops")
        os.makedirs(pkg_dir, exist_ok=True)
        # build_lib outlives a build: drop what an earlier one compiled (another
        # platform's libraries must never reach this wheel).
        for name in os.listdir(pkg_dir):
            if _is_compiled(name):
                os.remove(os.path.join(pkg_dir, name))
        prebuilt = _prebuilt_dir()
        if prebuilt:
            names = sorted(n for n in os.listdir(prebuilt) if _is_compiled(n))
            if "_build_info.json" not in names:
                raise SystemExit(f"metal_ops: METAL_OPS_PREBUILT={prebuilt} has no _build_info.json")
            for name in names:
                shutil.copy2(os.path.join(prebuilt, name), os.path.join(pkg_dir, name))
            return
        build_temp = self.get_finalized_command("build").build_temp
        _run_make(pkg_dir, os.path.join(os.path.abspath(build_temp), "metal_ops_make"))

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        pkg_dir = os.path.join(self.build_lib, "metal_ops")
        if os.path.isdir(pkg_dir):
            for name in sorted(os.listdir(pkg_dir)):
                if _is_compiled(name):
                    outputs.append(os.path.join(pkg_dir, name))
        return outputs


try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel


class BdistWheelPy3(bdist_wheel):
    """Tags the wheel py3-none-<platform>: compiled code, but no Python C API
    (the libraries are loaded by TensorFlow, not imported by Python)."""

    def finalize_options(self):
        platform_tag = os.environ.get("METAL_OPS_WHEEL_PLATFORM")
        if platform_tag:
            self.plat_name = platform_tag
        super().finalize_options()

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


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
# it as a module to check make_command() and _extras().
if __name__ == "__main__":
    setup(
        cmdclass={"build_py": BuildPyWithOps, "bdist_wheel": BdistWheelPy3},
        distclass=BinaryDistribution,
        install_requires=["numpy"] + _openblas_requirement(),
        extras_require=_extras(),
        long_description=_readme(),
        long_description_content_type="text/markdown",
    )
