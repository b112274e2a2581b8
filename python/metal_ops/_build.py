"""build_info(): what the installed op library was built with."""
import os

from metal_ops import _loader


def build_info():
    """Returns a dict: TensorFlow version built against and running, backends
    compiled (cpu / cuda / metal), the library paths, and (x86-64) the
    instruction-set level that runs, the levels built and the levels this CPU runs,
    and the CUDA kernels' library (present, architectures, loaded or why not)."""
    info = _loader.read_build_info() or {}
    try:
        paths = {"op_library": _loader.library_path()}
    except ImportError:  # METAL_OPS_ISA asks for what this build or CPU lacks: isa["error"]
        paths = {"op_library": None}
    grappler = os.path.join(_loader.PACKAGE_DIR, info.get("grappler_library") or "_metal_ops_grappler.so")
    if os.path.exists(grappler):
        paths["grappler_plugin"] = grappler
    import tensorflow as tf

    return {
        "tensorflow_built_against": info.get("tensorflow_version"),
        "tensorflow_running": tf.__version__,
        "backends": info.get("backends", []),
        "platform": info.get("platform"),
        "built": bool(info) and paths["op_library"] is not None and os.path.exists(paths["op_library"]),
        "isa": _loader.isa_info(info),
        "cuda": _loader.cuda_info(info),
        "paths": paths,
        # The macOS wheel: every build it holds (TensorFlow, tensorflow-metal, library).
        "tensorflow_builds": (_loader.read_raw_build_info() or {}).get("tensorflow_builds"),
    }
