"""Which Metal path the ops take, and the loading of the strict model of Metal.

The ops' CPU kernels send their Metal plans to the route METAL_OPS_METAL
selects (docs/ARCHITECTURE.md, "Metal plans"):

- ``0``: none, the CPU kernels compute;
- ``1``: the library's own Metal queue (macOS builds);
- ``shim`` / ``shim-stream``: the Metal host path (own queue / tensorflow-metal's
  stream) against the strict model of Metal, whose dispatches run the shaders
  compiled as C++ (test routes: build/libmetal_ops_shim_exec.so, which
  ``import metal_ops`` loads);
- unset: the own queue on a Mac without a tensorflow-metal device, else none.

With tensorflow-metal loaded (TensorFlow <= 2.19), ops placed on its GPU run
their TF_MetalStream kernels whatever this says.
"""
import ctypes
import os

ENV = "METAL_OPS_METAL"
SHIM_EXEC_ENV = "METAL_OPS_SHIM_EXEC_LIB"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_shim = None


def shim_executor_path():
    """The shim executor library: METAL_OPS_SHIM_EXEC_LIB, else the source tree's build/."""
    return os.environ.get(SHIM_EXEC_ENV) or os.path.join(_ROOT, "build", "libmetal_ops_shim_exec.so")


MODEL_ROUTES = ("shim", "shim-stream")


def load_shim_executor():
    """Loads the model of Metal (globally, so the op library finds it) when
    METAL_OPS_METAL names a model route; returns whether it is loaded. A
    missing library is no error here: the first op then fails saying how to
    build it."""
    global _shim
    if os.environ.get(ENV) not in MODEL_ROUTES:
        return _shim is not None
    if _shim is None and os.path.exists(shim_executor_path()):
        _shim = ctypes.CDLL(shim_executor_path(), mode=ctypes.RTLD_GLOBAL)
    return _shim is not None


def _op_library():
    from metal_ops import _loader

    _loader.load_library()
    return ctypes.CDLL(_loader.library_path())


def active_metal_path():
    """(name, reason): the Metal path the ops' CPU kernels take at this call, as the op
    library decides it: "cpu", "own-queue", "shim", "shim-stream", "tensorflow-metal" or
    "unavailable" (METAL_OPS_METAL asks for a path this build or machine lacks;
    the ops then fail saying so)."""
    load_shim_executor()
    lib = _op_library()
    name = ctypes.create_string_buffer(64)
    reason = ctypes.create_string_buffer(1024)
    lib.metal_ops_metal_path.restype = ctypes.c_int64
    lib.metal_ops_metal_path(name, ctypes.c_size_t(64), reason, ctypes.c_size_t(1024))
    return name.value.decode(), reason.value.decode()


def metal_runs():
    """(plans, passes) the Metal executors have run in this process."""
    lib = _op_library()
    lib.metal_ops_metal_path.restype = ctypes.c_int64
    lib.metal_ops_metal_passes_run.restype = ctypes.c_int64
    plans = lib.metal_ops_metal_path(None, ctypes.c_size_t(0), None, ctypes.c_size_t(0))
    return int(plans), int(lib.metal_ops_metal_passes_run())


def metal_fallbacks():
    """Calls that went back to the CPU after a Metal failure the CPU kernel
    does not have (a size, a shader compile, a GPU feature)."""
    lib = _op_library()
    lib.metal_ops_metal_fallbacks.restype = ctypes.c_int64
    return int(lib.metal_ops_metal_fallbacks())


HOST_COST_FIELDS = ("bytes_in", "bytes_out", "wrapped", "command_buffers", "waits")


def host_cost():
    """The host path's cost of the plans run in this process: bytes copied
    into Metal buffers and back, tensors wrapped without a copy, command
    buffers, CPU waits for the GPU."""
    lib = _op_library()
    out = (ctypes.c_uint64 * 5)()
    lib.metal_ops_metal_cost(out)
    return dict(zip(HOST_COST_FIELDS, map(int, out)))


MODEL_FIELDS = ("bytes_copied", "wrapped", "command_buffers", "waits", "violations", "dispatches")


def model_counters():
    """What the model of Metal counted in this process (None when it is not
    loaded): bytes copied into buffers, no-copy wraps, command buffers, waits,
    broken rules ("violations", the first in "first_violation"), dispatches."""
    if not load_shim_executor():
        return None
    out = (ctypes.c_uint64 * 6)()
    _shim.metal_ops_model_counters(out)
    text = ctypes.create_string_buffer(1024)
    _shim.metal_ops_model_first_violation(text, ctypes.c_size_t(1024))
    counters = dict(zip(MODEL_FIELDS, map(int, out)))
    counters["first_violation"] = text.value.decode()
    return counters
