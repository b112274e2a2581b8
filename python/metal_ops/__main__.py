"""`python -m metal_ops`: loads the op library (and the CUDA kernels' library
where it applies), prints how they were built and what loaded (JSON on
stdout) and, on stderr, which CPU instruction-set level runs and whether the
CUDA kernels are present and loaded."""
import json
import sys

from metal_ops import _loader, build_info


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
    if load_error:
        print(f"metal_ops: {load_error}", file=sys.stderr)
