"""`python -m metal_ops`: what the installed op library is and what runs here.

A short summary first: the library's version, the TensorFlow it was built
against and the one running, the backends built, which CPU instruction-set
level runs, whether CUDA kernels are built in, present, loaded, and which
Metal GPU path is active and why. `--json` prints the same, and more, as one
JSON object instead (build_info() with the load error and the GPU path).
`python -m metal_ops.selftest` checks the kernels. `--help` and `--version`
print without importing TensorFlow (metal_ops/__init__.py's _usage_only).
"""
import argparse
import importlib.util
import json
import os
import sys

import metal_ops
from metal_ops import _loader, _requirements
from metal_ops._build import build_info

METAL_ENV = "METAL_OPS_METAL"


def _tensorflow_metal_version():
    from importlib import metadata

    try:
        return metadata.version("tensorflow-metal")
    except metadata.PackageNotFoundError:
        return None


def derive_metal_path(info, tf_version, tensorflow_metal, platform=sys.platform, env=None):
    """(name, reason) of the GPU path a build without metal_ops.metal_path
    takes: "tensorflow-metal" (its GPU device's TF_MetalStream) or "none", from
    the build's backends, the running TensorFlow, tensorflow-metal's presence
    and METAL_OPS_METAL (0 / 1 / shim / shim-stream)."""
    env = os.environ if env is None else env
    forced = env.get(METAL_ENV, "").strip()
    if platform != "darwin":
        return "none", ("not macOS: no Apple GPU" + (f"; {METAL_ENV}={forced} asks for the model of Metal, which "
                                                     "this build has no Metal path for" if forced.startswith("shim") else ""))
    if "metal" not in (info or {}).get("backends", []):
        return "none", "this build has no Metal kernels"
    if forced == "0":
        return "none", f"{METAL_ENV}=0: the ops run on the CPU"
    own = (f"; {METAL_ENV}={forced} asks for the library's own Metal queue, which this build does not have"
           if forced == "1" else "")
    if tensorflow_metal and tf_version and _requirements.minor(tf_version) <= (2, 19):
        return "tensorflow-metal", (f"TensorFlow {tf_version} with tensorflow-metal {tensorflow_metal}: the ops' "
                                    f"Metal kernels run on its GPU device's TF_MetalStream (place them on /GPU:0)"
                                    + own)
    if tensorflow_metal:
        return "none", (f"tensorflow-metal {tensorflow_metal} is installed but does not load with TensorFlow "
                        f"{tf_version} (it loads with 2.19 and older): the ops run on the CPU" + own)
    return "none", (f"TensorFlow {tf_version} without tensorflow-metal has no GPU device, and this build has no "
                    f"Metal path of its own: the ops run on the CPU" + own)


def metal_path(info, tf_version):
    """(name, reason): metal_ops.metal_path.active_metal_path() where the
    package has it, else derive_metal_path()."""
    if importlib.util.find_spec("metal_ops.metal_path") is not None:
        return tuple(importlib.import_module("metal_ops.metal_path").active_metal_path())
    return derive_metal_path(info, tf_version, _tensorflow_metal_version())


def _cuda_line(cuda, backends=()):
    """What runs the CUDA kernels: the CUDA library (the wheel's `cuda`
    info), the op library itself (a source build with "cuda" in `backends`),
    or nothing."""
    if not cuda or not cuda.get("library"):
        if "cuda" in backends:
            return "CUDA kernels: built into the op library (a source build against TensorFlow's CUDA build)"
        return "CUDA kernels: none in this build"
    archs = cuda.get("archs") or {}
    built = " ".join(archs.get("sass", [])) + (f" + PTX {' '.join(archs['ptx'])}" if archs.get("ptx") else "")
    driver = ""
    if cuda.get("driver_floor"):
        have = f"the driver supports CUDA {cuda['driver_cuda']}" if cuda.get("driver_cuda") else "no NVIDIA driver found"
        driver = f"; built with CUDA {cuda.get('cuda_version')}, needs a driver for {cuda['driver_floor']}, {have}"
    if cuda.get("loaded"):
        return f"CUDA kernels: loaded ({built}; {cuda['reason']}{driver})"
    state = "present" if cuda.get("present") else "missing"
    return f"CUDA kernels: {state}, not loaded: {cuda['reason']}{driver}"


def _isa_line(isa):
    if isa.get("running") is None:
        return isa.get("error", "no op library can be loaded")
    how = (f"forced by METAL_OPS_ISA={isa['forced_by_env']}" if isa.get("forced_by_env")
           else "the -march=native build" if isa["running"] == "native"
           else "the highest level this CPU runs")
    return f"CPU kernels: {isa['running']} ({how}; built: {', '.join(isa['built'])})"


def report():
    """build_info() with the version, the load error (None when the library
    loaded) and the GPU path: what --json prints."""
    load_error = None
    try:
        _loader.load_library()
    except ImportError as e:
        load_error = str(e)
    info = {"version": metal_ops.__version__, **build_info(), "load_error": load_error}
    if not info.get("tensorflow_builds"):  # one build (only the macOS wheel holds several)
        info.pop("tensorflow_builds", None)
    name, reason = metal_path(_loader.read_build_info(), info.get("tensorflow_running"))
    info["metal_path"] = {"name": name, "reason": reason}
    if _loader.builds_xla_kernels():
        registered, why = _loader.xla_status()
        info["xla"] = {"registered": registered, "reason": why, "cuda_ops": sorted(_loader.xla_cuda_ops())}
    return info


def summary(info):
    """The lines a person reads: one fact each."""
    lines = [f"metal_ops {info['version']} ({os.path.dirname(os.path.abspath(metal_ops.__file__))})",
             f"TensorFlow: {info['tensorflow_running']} running, the library built against "
             f"{info['tensorflow_built_against'] or '(not built)'}",
             f"backends built: {', '.join(info['backends']) or 'none'}",
             "op library: " + (f"not loaded: {info['load_error']}" if info["load_error"]
                               else f"loaded ({info['paths']['op_library']})")]
    if info.get("isa"):
        lines.append(_isa_line(info["isa"]))
    lines.append(_cuda_line(info.get("cuda"), info["backends"]))
    lines.append(f"GPU path (Metal): {info['metal_path']['name']} ({info['metal_path']['reason']})")
    if "xla" in info:
        xla = info["xla"]
        state = "registered" if xla["registered"] else f"not registered ({xla['reason'] or 'the op library did not load'})"
        lines.append(f"XLA kernels: {state}; CUDA handlers: {', '.join(xla['cuda_ops']) or 'none'} (docs/XLA.md)")
    if info.get("tensorflow_builds"):
        lines.append("op libraries in this package, for TensorFlow " + ", ".join(
            str(b.get("tensorflow_version")) for b in info["tensorflow_builds"]))
    lines.append("checks: python -m metal_ops.selftest (the kernels against references); --json: all of this as JSON")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m metal_ops", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--version", action="version", version=f"metal_ops {metal_ops.__version__}")
    args = parser.parse_args(argv)
    info = report()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print("\n".join(summary(info)))
    return 1 if info["load_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
