"""Which Metal path the ops take, and the loading of the strict model of Metal.

The ops' CPU kernels send their Metal plans to the route METAL_OPS_METAL
selects (docs/ARCHITECTURE.md, "Metal plans"):

- ``0``: none, the CPU kernels compute;
- ``1``: the library's own Metal queue (macOS builds);
- ``shim`` / ``shim-stream``: the Metal host path (own queue / tensorflow-metal's
  stream) against the strict model of Metal, whose dispatches run the shaders
  compiled as C++ (test routes: the test harness loads the model,
  tests/metal_shim/model.py; without it the ops fail saying so);
- unset: the own queue on a Mac without a tensorflow-metal device, else none.

With tensorflow-metal loaded (TensorFlow <= 2.19), ops placed on its GPU run
their TF_MetalStream kernels whatever this says.
"""
import ctypes

def _op_library():
    from metal_ops import _loader

    _loader.load_library()
    return ctypes.CDLL(_loader.library_path())


def active_metal_path():
    """(name, reason): the Metal path the ops' CPU kernels take at this call, as the op
    library decides it: "cpu", "own-queue", "shim", "shim-stream", "tensorflow-metal" or
    "unavailable" (METAL_OPS_METAL asks for a path this build or machine lacks;
    the ops then fail saying so)."""
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

