"""build_info(): what the installed op library was built with."""
import os

from metal_ops import _loader


def build_info():
    """Returns a dict: TensorFlow version built against and running, backends
    compiled (cpu / cuda / metal) and the library paths."""
    info = _loader.read_build_info() or {}
    paths = {"op_library": _loader.library_path()}
    grappler = os.path.join(_loader.PACKAGE_DIR, "_metal_ops_grappler.so")
    if os.path.exists(grappler):
        paths["grappler_plugin"] = grappler
    import tensorflow as tf

    return {
        "tensorflow_built_against": info.get("tensorflow_version"),
        "tensorflow_running": tf.__version__,
        "backends": info.get("backends", []),
        "platform": info.get("platform"),
        "built": bool(info) and os.path.exists(paths["op_library"]),
        "paths": paths,
    }
