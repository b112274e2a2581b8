"""Thread-safe loading of the compiled op library.

The library is loaded at `import metal_ops` where it has XLA kernels (they
must be registered before TensorFlow's first op: docs/XLA.md), else on
first use; exactly once per process, and only after checking that the
running TensorFlow is the one it was built against: C++-API custom ops bind
to one TensorFlow minor version (checked at `import metal_ops` first).

Which library: a source build (`make`) has one, `_metal_ops.so`, compiled with
-march=native. The Linux wheel has one per x86-64 microarchitecture level
(`_metal_ops.<level>.so`, `make isa-libs`); the highest level this CPU runs is
loaded, or the one METAL_OPS_ISA names (`x86-64-v2`, `x86-64-v3`, `x86-64-v4`,
or `native` for the -march=native library of a tree that has both). A level
the CPU lacks is refused with the missing CPU flags named, never loaded (it
would die of an illegal instruction).

The Linux wheel may also hold the GPU kernels, `_metal_ops_cuda.so` (build info
"cuda_library"): loaded right after the op library (whose ops it registers
kernels for), and only when the running TensorFlow is a CUDA build and sees a
GPU, so nothing CUDA is ever loaded on a CPU-only machine or TensorFlow,
and only where the NVIDIA driver runs its CUDA major version and every GPU
is one its code serves (else the reason is recorded for `python -m metal_ops`).
METAL_OPS_CUDA=0 keeps it unloaded (the ops then run on the CPU).

The macOS wheel holds one build per TensorFlow stack (build info
"tensorflow_builds": `_metal_ops.tf2.21.so` for TensorFlow 2.21,
`_metal_ops.tf2.19.so` for TensorFlow 2.19 + tensorflow-metal, each with its
Grappler plugin); read_build_info() gives the build of the running TensorFlow,
and a TensorFlow no build matches is an ImportError naming the supported ones.

OpenBLAS, which the op library needs by soname, is loaded first from where
its package says it is (scipy_openblas32.get_lib_dir()), so that an install
split over several folders (`pip install --target`) finds it.
"""
import json
import os
import platform
import sys
import re
import threading

from metal_ops import _requirements

_LIBRARY_NAME = "_metal_ops.so"
_BUILD_INFO_NAME = "_build_info.json"
_lock = threading.Lock()
_module = None
_loaded_path = None

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

ISA_ENV = "METAL_OPS_ISA"
CUDA_ENV = "METAL_OPS_CUDA"
_cuda_state = {"loaded": None, "reason": "the op library is not loaded yet"}
NATIVE = "native"
# The x86-64 psABI microarchitecture levels, as the Linux kernel names their CPU
# flags in /proc/cpuinfo (pni = SSE3, abm = LZCNT). Each level includes the ones
# before it. The kernel lists AVX/AVX-512 only when the OS saves their registers.
ISA_LEVEL_FLAGS = {
    "x86-64-v2": ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
ISA_LEVELS = tuple(ISA_LEVEL_FLAGS)


def builds_xla_kernels():
    """Whether the op library has XLA kernels (docs/XLA.md): every build but
    the macOS one (Metal has no XLA)."""
    return platform.system() != "Darwin"


def has_xla_kernels(ops=None):
    """Whether XLA can compile the library's ops in this process: XLA kernels
    with host handlers, registered before TensorFlow's first op
    (register_xla_kernels); where TensorFlow lists a GPU, also CUDA handlers
    for every op of `ops` (TensorFlow op names; the CUDA library registers
    them, register_xla_cuda_handlers). Layers set `supports_jit` from it, so
    Keras turns XLA on only where it can compile them."""
    if not builds_xla_kernels() or _xla_state["registered"] is False:
        return False
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return True
    return ops is not None and all(op in _xla_state["cuda_ops"] for op in ops)


# The library's XLA registration (register_xla_kernels): None before it ran,
# then whether XLA compiles the ops in this process, and why not; the ops
# with CUDA handlers (register_xla_cuda_handlers).
_xla_state = {"registered": None, "reason": None, "cuda_ops": frozenset()}

# MetalOpsRegisterXla's results (kernels/xla/register_xla.cc).
XLA_REGISTERED, XLA_REGISTERED_LATE, XLA_OTHER_COPY, XLA_HANDLER_REFUSED = range(4)


def register_xla_kernels(path):
    """Registers the XLA kernels of the library at `path` (already loaded by
    TensorFlow, its ops this process's) by calling its MetalOpsRegisterXla:
    the library registers nothing with XLA while it loads, so that a second
    copy of it in the process cannot abort it (XLA's op registry aborts on a
    name registered twice). Once per process; the library checks XLA's
    registry itself and refuses where another copy registered first.
    XLA registered late (after TensorFlow's first op, when XLA took op
    kernels in) is a warning: the ops run, but not under XLA in this process."""
    if not builds_xla_kernels() or _xla_state["registered"] is not None:
        return
    import ctypes

    # RTLD_NOLOAD: the copy TensorFlow loaded, never a new one.
    library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    register = library.MetalOpsRegisterXla
    register.restype = ctypes.c_int
    register.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    message = ctypes.create_string_buffer(4096)
    result = register(message, len(message))
    text = message.value.decode("utf-8", "replace")
    _xla_state["registered"] = result == XLA_REGISTERED
    _xla_state["reason"] = text or None
    if result == XLA_REGISTERED:
        _record_cuda_ops(library)  # TensorFlow's CUDA build: the CUDA handlers are in this library
    if result == XLA_OTHER_COPY:
        raise ImportError(_already_registered_message(path))
    if result == XLA_HANDLER_REFUSED:
        raise ImportError(f"metal_ops: {path}: {text}")
    if result == XLA_REGISTERED_LATE:
        import warnings

        warnings.warn(f"metal_ops: {text} (docs/XLA.md).", RuntimeWarning, stacklevel=3)


def register_xla_cuda_handlers(path):
    """Registers the CUDA handlers of the XLA kernels in the CUDA library at
    `path` (loaded by TensorFlow) by calling its MetalOpsRegisterXlaCuda
    (kernels/xla/register_xla_gpu.cc), once per process, and records the ops
    they cover. A CUDA library without them (built before they existed)
    registers nothing: the ops then run without XLA on the GPU."""
    if not builds_xla_kernels() or not _xla_state["registered"]:
        return
    import ctypes

    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:  # not loaded in this process (TensorFlow's load_library did not map it): nothing to register
        return
    register = getattr(library, "MetalOpsRegisterXlaCuda", None)
    if register is None:
        return
    register.restype = ctypes.c_int
    register.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    message = ctypes.create_string_buffer(4096)
    if register(message, len(message)) != XLA_REGISTERED:
        import warnings

        warnings.warn(f"metal_ops: {path}: {message.value.decode('utf-8', 'replace')} (the ops run without XLA "
                      "on the GPU).", RuntimeWarning, stacklevel=3)
        return
    _record_cuda_ops(library)


def _record_cuda_ops(library):
    """Adds the ops whose CUDA handlers `library` (a ctypes.CDLL) holds and
    registered to _xla_state["cuda_ops"]; none where it has none."""
    names = getattr(library, "MetalOpsXlaCudaHandlerNames", None)
    if names is None:
        return
    import ctypes

    names.restype = ctypes.c_char_p
    _xla_state["cuda_ops"] = _xla_state["cuda_ops"] | frozenset(n for n in names().decode().split(",") if n)


def xla_cuda_ops():
    """The TensorFlow ops whose XLA kernels have CUDA handlers in this
    process (register_xla_cuda_handlers; empty without the CUDA library)."""
    return _xla_state["cuda_ops"]


def xla_status():
    """(registered, reason): whether XLA compiles the library's ops in this
    process (None before the library loaded) and why not."""
    return _xla_state["registered"], _xla_state["reason"]


def read_raw_build_info():
    """_build_info.json as written, or None when nothing was built."""
    path = os.path.join(PACKAGE_DIR, _BUILD_INFO_NAME)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def running_tensorflow_version():
    """The TensorFlow version of this process: the imported module's, else the
    installed distribution's (without importing it), else None."""
    tf = sys.modules.get("tensorflow")
    version = getattr(tf, "__version__", None)
    if version:
        return version
    installed = _requirements.installed_tensorflow_distribution()
    return installed[1] if installed else None


# The newest Python tensorflow-metal has wheels for (the extra [metal] installs nothing above it).
MACOS_METAL_PYTHON_MAX = _requirements.MACOS_STACKS["metal"]["python"][1]


def select_tensorflow_build(info, tf_version):
    """The build info of the build for TensorFlow `tf_version` in a build info
    with "tensorflow_builds" (the macOS wheel), flattened to a one-build info;
    `info` itself when it has one build. Raises ImportError naming the
    TensorFlow versions the builds support when none matches."""
    builds = info.get("tensorflow_builds")
    if not builds:
        return info
    common = {k: v for k, v in info.items() if k != "tensorflow_builds"}
    if tf_version:
        for build in builds:
            if _requirements.minor(build["tensorflow_version"]) == _requirements.minor(tf_version):
                return {**common, **build}
    running = f"TensorFlow {tf_version} is installed" if tf_version else "no TensorFlow is installed"
    note = ""
    if not tf_version and sys.platform == "darwin" and sys.version_info[:2] > MACOS_METAL_PYTHON_MAX:
        note = (f" On Python {sys.version_info[0]}.{sys.version_info[1]} the extra [metal] installs nothing: "
                f"tensorflow-metal has no wheels for it; use [cpu] (TensorFlow 2.21; the GPU through this "
                f"library's own Metal path) or a Python 3.9-3.12 for tensorflow-metal.")
    raise ImportError(
        f"metal_ops: this package has op libraries for {_requirements.describe_builds(builds)}, and "
        f"{running}. C++ custom ops bind to one TensorFlow minor version: install one of these.{note}")


def read_build_info():
    """What `make` recorded about the build of the running TensorFlow, or None
    when nothing was built. For a wheel with several builds and a TensorFlow
    none of them matches: the common keys, no library, and "error" (the
    ImportError's message, raised by check_tensorflow and load_library)."""
    info = read_raw_build_info()
    if info is None or not info.get("tensorflow_builds"):
        return info
    try:
        return select_tensorflow_build(info, running_tensorflow_version())
    except ImportError as e:
        common = {k: v for k, v in info.items() if k != "tensorflow_builds"}
        return {**common, "tensorflow_version": None, "backends": [], "error": str(e)}


def cpu_flags():
    """The CPU flags Linux reports (/proc/cpuinfo), or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def missing_flags(level, flags):
    """The CPU flags of `level` (and of the levels below it) that `flags` lacks."""
    needed = []
    for name in ISA_LEVELS[: ISA_LEVELS.index(level) + 1]:
        needed += ISA_LEVEL_FLAGS[name]
    return [f for f in needed if f not in flags]


def cpu_isa_levels(flags=None):
    """The levels this CPU runs, lowest first ([] when its flags cannot be read)."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return []
    return [level for level in ISA_LEVELS if not missing_flags(level, flags)]


def select_library(info, env=None, flags=None):
    """(level, file name) of the op library to load for build info `info`.

    `level` is NATIVE for a -march=native build. Raises ImportError for a
    METAL_OPS_ISA this build or this CPU cannot honour.
    """
    env = os.environ if env is None else env
    if info.get("error"):
        raise ImportError(info["error"])
    isa_libraries = info.get("isa_libraries") or {}
    native = info.get("library")
    forced = env.get(ISA_ENV, "").strip()
    if flags is None:
        flags = cpu_flags()
    if forced:
        if forced == NATIVE and native:
            return NATIVE, native
        if forced not in isa_libraries:
            choices = list(isa_libraries) + ([NATIVE] if native else [])
            raise ImportError(
                f"metal_ops: {ISA_ENV}={forced} is not a level this build has a library for; "
                f"choose one of {', '.join(choices)} (or unset {ISA_ENV})"
                + ("" if isa_libraries else ": this -march=native build has no per-level libraries "
                   "(`make isa-libs` builds them)"))
        if flags is not None and missing_flags(forced, flags):
            raise ImportError(
                f"metal_ops: {ISA_ENV}={forced} asks for instructions this CPU lacks "
                f"(missing CPU flags: {', '.join(missing_flags(forced, flags))}); it runs "
                f"{', '.join(cpu_isa_levels(flags)) or 'none of the x86-64 levels'}. Unset {ISA_ENV} "
                f"to pick the highest level this CPU runs.")
        return forced, isa_libraries[forced]
    if native:
        return NATIVE, native
    if not isa_libraries:
        raise ImportError(f"metal_ops: the build info in {PACKAGE_DIR} names no op library")
    if flags is None:
        # No /proc/cpuinfo: only the baseline is safe.
        level = ISA_LEVELS[0] if ISA_LEVELS[0] in isa_libraries else sorted(isa_libraries)[0]
        return level, isa_libraries[level]
    runnable = [level for level in cpu_isa_levels(flags) if level in isa_libraries]
    if not runnable:
        lowest = min(isa_libraries, key=ISA_LEVELS.index)
        raise ImportError(
            f"metal_ops: this CPU lacks {', '.join(missing_flags(lowest, flags))}, which the "
            f"lowest level of this build ({lowest}) needs; build metal_ops from source on "
            f"this machine (docs/BUILDING.md).")
    level = runnable[-1]
    return level, isa_libraries[level]


def library_path():
    """The op library this process loads (or has loaded)."""
    if _loaded_path is not None:
        return _loaded_path
    info = read_build_info()
    if info is None:
        return os.path.join(PACKAGE_DIR, _LIBRARY_NAME)
    return os.path.join(PACKAGE_DIR, select_library(info)[1])


def isa_info(info=None):
    """What `python -m metal_ops` reports about instruction sets: the level that
    runs (or would run), the levels built, the levels this CPU runs, and whether
    METAL_OPS_ISA chose it."""
    info = read_build_info() if info is None else info
    if not info:
        return None
    result = {
        "built": (["native"] if info.get("library") else []) + list(info.get("isa_libraries") or {}),
        "cpu": cpu_isa_levels() if platform.machine() in ("x86_64", "AMD64") else [],
        "forced_by_env": os.environ.get(ISA_ENV) or None,
    }
    try:
        result["running"] = select_library(info)[0]
    except ImportError as e:
        result["running"] = None
        result["error"] = str(e)
    if info.get("isa_tune"):
        result["tune"] = info["isa_tune"]
    return result


def check_tensorflow_version(built_version, running_version, platform_name=None):
    """Raises ImportError when the library's TF minor version differs."""
    if _requirements.minor(built_version) != _requirements.minor(running_version):
        hint = _requirements.install_hint(built_version, platform_name or platform.system())
        raise ImportError(
            f"metal_ops was built against TensorFlow {built_version} but "
            f"TensorFlow {running_version} is running. C++ custom ops bind to one "
            f"TensorFlow minor version: install a matching TensorFlow (`{hint}`), or build "
            f"metal_ops for this TensorFlow from source: `make clean && make` in a clone "
            f"(or `pip install --no-build-isolation <clone>`)."
        )


def check_tensorflow():
    """At `import metal_ops`: TensorFlow importable and of the minor version the
    library was built against (ImportError naming both and the fix otherwise;
    for a wheel with several builds, the TensorFlow versions they support).
    Nothing to check before a source tree has been built."""
    raw = read_raw_build_info()
    if raw is None:
        return
    try:
        import tensorflow as tf
    except ImportError as e:
        if raw.get("tensorflow_builds"):
            raise ImportError(f"{select_tensorflow_build_message(raw)} Importing TensorFlow failed: {e}.") from e
        hint = _requirements.install_hint(raw["tensorflow_version"], raw.get("platform", ""))
        raise ImportError(
            f"metal_ops needs TensorFlow {_requirements.minor_range(raw['tensorflow_version'])} "
            f"(its op library was built against {raw['tensorflow_version']}), and importing "
            f"TensorFlow failed: {e}. Install it with `{hint}` (or `pip install "
            f"'tf-metal-ops[cpu]'`); the wheel does not require a TensorFlow distribution, so "
            f"that it never installs a second one beside yours.") from e
    info = select_tensorflow_build(raw, tf.__version__)
    check_tensorflow_version(info["tensorflow_version"], tf.__version__, info.get("platform"))


def select_tensorflow_build_message(raw):
    """The ImportError message of a wheel with several builds and no TensorFlow."""
    try:
        select_tensorflow_build(raw, None)
    except ImportError as e:
        return str(e)
    return ""


def driver_cuda_version():
    """The CUDA version the NVIDIA driver supports (e.g. 12040 for 12.4, from
    cuDriverGetVersion), or None when libcuda cannot be asked."""
    import ctypes

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
        return version.value
    except (OSError, AttributeError):
        return None


# The first Linux driver series of each CUDA major version (NVIDIA's CUDA
# Toolkit release notes, "CUDA Driver" table).
DRIVER_SERIES = {"12": "the 525", "13": "the 580"}


def cuda_driver_floor(built):
    """The oldest driver CUDA version (cuDriverGetVersion's form) that runs a
    library built with CUDA `built` ("12.9"): its major version's first
    (12000), as NVIDIA's minor version compatibility gives for machine code."""
    return int(built.split(".")[0]) * 1000 if built else None


def _version_text(number):
    return f"{number // 1000}.{number % 1000 // 10}"


def lowest_capability(archs):
    """(major, minor) of the oldest GPU the library's code runs on (its lowest
    sm_XY / compute_XY), or None when the build info does not say."""
    numbers = [int(re.match(r"\d+", name.split("_")[1]).group(0))
               for name in (archs or {}).get("sass", []) + (archs or {}).get("ptx", [])]
    return divmod(min(numbers), 10) if numbers else None


def cuda_decision(info, built_with_cuda, gpus, env=None, driver_version=driver_cuda_version, capabilities=None):
    """(load, reason): whether to load the build's CUDA library, and why (or why not).

    `built_with_cuda`, `gpus`, `driver_version` and `capabilities` are callables
    (tf.test.is_built_with_cuda, lambda: tf.config.list_physical_devices("GPU"),
    driver_cuda_version, the GPUs' (major, minor) compute capabilities),
    asked only when the answer still depends on them: a build without the
    library asks TensorFlow nothing, and a TensorFlow that is not a CUDA build
    is never asked for GPUs. A library built with a CUDA major version newer
    than the driver supports, or without code for a GPU that TensorFlow sees,
    stays unloaded with a reason (its kernels could not start; TensorFlow's
    own GPU kernels still run)."""
    env = os.environ if env is None else env
    name = (info or {}).get("cuda_library")
    if not name:
        return False, "this build has no CUDA library"
    if env.get(CUDA_ENV, "").strip() == "0":
        return False, f"{CUDA_ENV}=0"
    if not os.path.exists(os.path.join(PACKAGE_DIR, name)):
        return False, f"{name} is named by the build info but missing from {PACKAGE_DIR}"
    if not built_with_cuda():
        return False, "the running TensorFlow is not a CUDA build"
    if not gpus():
        return False, "TensorFlow sees no GPU"
    built = (info or {}).get("cuda_version")
    driver = driver_version() if built else None
    floor = cuda_driver_floor(built)
    if built and driver is not None and driver < floor:
        major = built.split(".")[0]
        return False, (f"the NVIDIA driver supports CUDA {_version_text(driver)}, but {name} was built "
                       f"with CUDA {built}, which needs a driver for CUDA {_version_text(floor)} "
                       f"({DRIVER_SERIES.get(major, 'a newer')} series) or newer: upgrade the driver; "
                       "this library's ops run on the CPU until then")
    lowest = lowest_capability((info or {}).get("cuda_archs"))
    old = [c for c in (capabilities() if capabilities and lowest else [])
           if c is not None and tuple(c) < lowest]
    if old:
        return False, (f"a GPU of compute capability {old[0][0]}.{old[0][1]}: {name} holds code for "
                       f"{lowest[0]}.{lowest[1]} and newer (the kernels need tensor-core mma.sync TF32 and "
                       "cp.async); this library's ops run on the CPU")
    return True, "TensorFlow is a CUDA build and sees a GPU"


def gpu_capabilities(tf):
    """(major, minor) compute capability of each GPU TensorFlow lists (None
    where TensorFlow does not say)."""
    return [tf.config.experimental.get_device_details(g).get("compute_capability")
            for g in tf.config.list_physical_devices("GPU")]


def cuda_info(info=None):
    """What `python -m metal_ops` reports about the CUDA library: its path (None
    without one), its architectures, whether this process loaded it and why (not)."""
    info = read_build_info() if info is None else info
    name = (info or {}).get("cuda_library")
    floor = cuda_driver_floor((info or {}).get("cuda_version"))
    driver = driver_cuda_version() if name else None
    return {
        "library": os.path.join(PACKAGE_DIR, name) if name else None,
        "driver_cuda": _version_text(driver) if driver else None,
        "driver_floor": (f"CUDA {_version_text(floor)} ({DRIVER_SERIES.get(str(floor // 1000), 'a newer')} "
                         "series or newer)") if floor else None,
        "present": bool(name) and os.path.exists(os.path.join(PACKAGE_DIR, name)),
        "archs": (info or {}).get("cuda_archs"),
        "cuda_version": (info or {}).get("cuda_version"),
        "loaded": bool(_cuda_state["loaded"]),
        "reason": _cuda_state["reason"],
    }


def _load_cuda_library(tf, info):
    load, reason = cuda_decision(info, tf.test.is_built_with_cuda,
                                 lambda: tf.config.list_physical_devices("GPU"),
                                 capabilities=lambda: gpu_capabilities(tf))
    if load:
        path = os.path.join(PACKAGE_DIR, info["cuda_library"])
        try:
            tf.load_library(path)
        except Exception as e:  # TensorFlow raises NotFoundError for a library that fails to load
            raise ImportError(
                f"metal_ops: the GPU kernels ({path}) failed to load in TensorFlow {tf.__version__}: {e}. "
                f"Set {CUDA_ENV}=0 to run the ops on the CPU only, and please report this "
                f"(with the output of `python -m metal_ops`).") from e
        _cuda_state["loaded"] = path
        register_xla_cuda_handlers(path)
    _cuda_state["reason"] = reason


def preload_openblas():
    """Loads OpenBLAS from where its package says it is
    (`scipy_openblas32.get_lib_dir()`), before the op library that needs it
    by soname (libscipy_openblas.so): the op library's own RUNPATH finds it
    only when both packages share one site-packages, not when they are
    installed into different folders (`pip install --target`, PYTHONPATH).
    (Importing scipy_openblas32 loads it too, in the pinned release; the
    explicit load does not depend on that.) Nothing to do without the
    package (a source build may link another BLAS)."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    import ctypes

    lib_dir = scipy_openblas32.get_lib_dir()
    names = [n for n in sorted(os.listdir(lib_dir)) if n.startswith(f"lib{scipy_openblas32.get_library()}.")]
    if not names:
        return None
    path = os.path.join(lib_dir, names[0])
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return path


# Every op of the library but the tutorial ZeroOut is named MetalOps<Name>.
OP_PREFIX = "MetalOps"


def load_library():
    """Returns the module of generated op wrappers, loading it once."""
    global _module, _loaded_path
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            import tensorflow as tf

            info = read_raw_build_info()
            if info is not None:
                info = select_tensorflow_build(info, tf.__version__)
            path = os.path.join(PACKAGE_DIR, select_library(info)[1]) if info else library_path()
            if not os.path.exists(path) or info is None:
                raise ImportError(
                    f"metal_ops: compiled op library not found at {path}. Build it "
                    f"with `make` in the repository root (or install the package "
                    f"with `pip install .`)."
                )
            check_tensorflow_version(info["tensorflow_version"], tf.__version__, info.get("platform"))
            preload_openblas()
            module = tf.load_op_library(path)
            if not any(name.startswith(OP_PREFIX) for name in dir(module)):
                # TensorFlow wraps only the ops a library newly registers (as
                # attributes named after them): another copy got there first
                # (its kernels would run).
                raise ImportError(_already_registered_message(path))
            register_xla_kernels(path)
            _loaded_path = path
            _module = module
            _load_cuda_library(tf, info)
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
