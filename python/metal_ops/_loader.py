"""Lazy, thread-safe loading of the compiled op library.

The library is loaded on first use (not at `import metal_ops`), exactly once per
process, and only after checking that the running TensorFlow is the one it was
built against: C++-API custom ops bind to one TensorFlow minor version.
"""
import json
import os
import threading

_LIBRARY_NAME = "_metal_ops.so"
_BUILD_INFO_NAME = "_build_info.json"
_lock = threading.Lock()
_module = None

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def library_path():
    return os.path.join(PACKAGE_DIR, _LIBRARY_NAME)


def read_build_info():
    """What `make` recorded about the build, or None when nothing was built."""
    path = os.path.join(PACKAGE_DIR, _BUILD_INFO_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _minor_version(version):
    return ".".join(version.split(".")[:2])


def check_tensorflow_version(built_version, running_version):
    """Raises ImportError when the library's TF minor version differs."""
    if _minor_version(built_version) != _minor_version(running_version):
        raise ImportError(
            f"metal_ops was built against TensorFlow {built_version} but "
            f"TensorFlow {running_version} is running. C++ custom ops bind to one "
            f"TensorFlow minor version: rebuild with `make clean && make` (or "
            f"`pip install --force-reinstall .`) in this environment, or install "
            f"tensorflow=={built_version}."
        )


# Every op of the library but the tutorial ZeroOut is named MetalOps<Name>.
OP_PREFIX = "MetalOps"


def load_library():
    """Returns the module of generated op wrappers, loading it once."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            import tensorflow as tf

            path = library_path()
            info = read_build_info()
            if not os.path.exists(path) or info is None:
                raise ImportError(
                    f"metal_ops: compiled op library not found at {path}. Build it "
                    f"with `make` in the repository root (or install the package "
                    f"with `pip install .`)."
                )
            check_tensorflow_version(info["tensorflow_version"], tf.__version__)
            module = tf.load_op_library(path)
            if not any(name.startswith(OP_PREFIX) for name in dir(module)):
                # TensorFlow wraps only the ops a library newly registers (as
                # attributes named after them): another copy got there first
                # (its kernels would run).
                raise ImportError(_already_registered_message(path))
            _module = module
    return _module


def mapped_files():
    """Paths of the files mapped into this process (Linux /proc/self/maps), else set()."""
    try:
        with open("/proc/self/maps") as f:
            return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return set()


def loaded_libraries():
    """Paths of the shared objects mapped into this process (Linux), else []."""
    return sorted(p for p in mapped_files() if ".so" in os.path.basename(p) or p.endswith(".dylib"))


def _already_registered_message(path):
    others = [p for p in loaded_libraries()
              if os.path.basename(p).startswith("_metal_ops") and p.endswith(".so")
              and "grappler" not in os.path.basename(p) and os.path.realpath(p) != os.path.realpath(path)]
    where = f" ({', '.join(others)})" if others else ""
    return (
        f"metal_ops: the ops of {path} are already registered in this process by another copy "
        f"of the metal_ops op library{where}, loaded before it (e.g. another installed metal_ops, "
        f"or a tf.load_op_library of another build). TensorFlow keeps the first copy's ops and "
        f"kernels, so this one cannot be used. Load only one copy per process: remove the other "
        f"one from the path, or use it instead of this package."
    )
