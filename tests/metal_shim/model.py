"""The strict model of Metal for the test harness: loads
build/libmetal_ops_shim_exec.so (tests/metal_shim/metal_model.cc and the
shaders compiled as C++) into the process, globally, so the op library's
Metal host path finds it (kernels/metal_plan/executor.cc looks up
`metal_ops_model_hooks`) when METAL_OPS_METAL names a model route:

- ``shim``: the own-queue host path against the model;
- ``shim-stream``: tensorflow-metal's stream route against the model.

tests/conftest.py loads it for a pytest run started with such a route and
puts AUTOLOAD on the PYTHONPATH of the processes the tests start (its
sitecustomize.py loads the model there too). The package itself never loads
it (it ships no path into the source tree). METAL_OPS_SHIM_EXEC_LIB names
another file (a test of the missing library).
"""
import ctypes
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = "METAL_OPS_METAL"
LIB_ENV = "METAL_OPS_SHIM_EXEC_LIB"
ROUTES = ("shim", "shim-stream")
FIELDS = ("bytes_copied", "wrapped", "command_buffers", "waits", "violations", "dispatches")
# The folder whose sitecustomize.py loads the model in a child process.
AUTOLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "autoload")
# The code a child process runs first (python -c): the model as `_model`.
PRELUDE = "from tests.metal_shim import model as _model; _model.load(); "

_lib = None


def path():
    """The model's library: METAL_OPS_SHIM_EXEC_LIB, else the tree's build/."""
    return os.environ.get(LIB_ENV) or os.path.join(ROOT, "build", "libmetal_ops_shim_exec.so")


def load():
    """Loads the model (once) when METAL_OPS_METAL names a model route and
    the library exists; returns whether it is loaded. A missing library is
    no error here: the first op then fails saying how to build it."""
    global _lib
    if _lib is None and os.environ.get(ENV) in ROUTES and os.path.exists(path()):
        _lib = ctypes.CDLL(path(), mode=ctypes.RTLD_GLOBAL)
    return _lib is not None


def with_autoload(pythonpath):
    """`pythonpath` (a PYTHONPATH value) with AUTOLOAD first."""
    rest = [p for p in pythonpath.split(os.pathsep) if p and p != AUTOLOAD]
    return os.pathsep.join([AUTOLOAD] + rest)


def counters():
    """What the model counted in this process (None when it is not loaded):
    bytes copied into buffers, no-copy wraps, command buffers, waits, broken
    rules ("violations", the first in "first_violation"), dispatches."""
    if not load():
        return None
    out = (ctypes.c_uint64 * len(FIELDS))()
    _lib.metal_ops_model_counters(out)
    text = ctypes.create_string_buffer(1024)
    _lib.metal_ops_model_first_violation(text, ctypes.c_size_t(1024))
    result = dict(zip(FIELDS, map(int, out)))
    result["first_violation"] = text.value.decode()
    return result


def compiles():
    """The model's compiles in this process (None when it is not loaded), in
    order: (library, the instantiation compiled with its body, or None for the
    body alone, how many instantiations the text compiled holds)."""
    if not load():
        return None
    text = ctypes.create_string_buffer(1 << 16)
    _lib.metal_ops_model_compiles(text, ctypes.c_size_t(len(text)))
    rows = [line.split(" ") for line in text.value.decode().splitlines()]
    return [(library, None if name == "-" else name, int(count)) for library, name, count in rows]
