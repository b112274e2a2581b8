"""`python -m metal_ops`: loads the op library (and the CUDA kernels' library
where it applies), prints how they were built and what loaded (JSON on
stdout) and, on stderr, which CPU instruction-set level runs, whether the
CUDA kernels are present and loaded, and which Metal GPU path is active and why."""
import importlib.util
import json
import os
import sys

from metal_ops import _loader, _requirements, build_info

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


def _cuda_line(cuda):
    if not cuda or not cuda.get("library"):
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


if __name__ == "__main__":
    load_error = None
    try:
        _loader.load_library()
    except ImportError as e:
        load_error = str(e)
    info = build_info()
    info["load_error"] = load_error
    name, reason = metal_path(_loader.read_build_info(), info.get("tensorflow_running"))
    info["metal_path"] = {"name": name, "reason": reason}
    print(json.dumps(info, indent=2))
    isa = info.get("isa")
    if isa:
        if isa.get("running") is None:
            line = isa.get("error", "no op library can be loaded")
        else:
            how = (f"forced by METAL_OPS_ISA={isa['forced_by_env']}" if isa.get("forced_by_env")
                   else "the -march=native build" if isa["running"] == "native"
                   else "the highest level this CPU runs")
            line = f"CPU kernels: {isa['running']} ({how}; built: {', '.join(isa['built'])})"
        print(f"metal_ops: {line}", file=sys.stderr)
    print(f"metal_ops: {_cuda_line(info.get('cuda'))}", file=sys.stderr)
    print(f"metal_ops: GPU path: {name} ({reason})", file=sys.stderr)
    if _loader.builds_xla_kernels():
        registered, why = _loader.xla_status()
        state = "registered" if registered else f"not registered ({why or 'the op library did not load'})"
        cuda_ops = ", ".join(sorted(_loader.xla_cuda_ops())) or "none"
        print(f"metal_ops: XLA kernels: {state}; CUDA handlers: {cuda_ops} (docs/XLA.md)", file=sys.stderr)
    if load_error:
        print(f"metal_ops: {load_error}", file=sys.stderr)
