"""`python -m metal_ops.selftest`: every op of this library against a
reference, on this machine's devices. Where TensorFlow lists a GPU (CUDA on
Linux, Metal through tensorflow-metal on a Mac), each op on each GPU device
against the same op on the CPU; where it lists none, the CPU kernels on
/CPU:0 against the independent float64 NumPy references the package ships
(metal_ops._reference, one per op). `--help` says which applies to this
build and platform; `--list` prints the cases without running them.

Each op module declares its cases (a function selftest_cases: op_modules()),
by dtype (float32, float16 where the op has it, integer types where it has
them) and shape (odd sizes, empty tensors, one large case). For each case the
self-test runs the forward pass and the gradients of sum(cotangent * output)
with respect to every floating-point input (forward only where the case says
so) on the device and the reference, and prints one table: op, case, dtype,
device, the largest error against the reference, the tolerance, pass/fail,
and the time of one forward + backward pass with the results read back to
the host (the fastest of --repeat runs, after one warm-up run) on each. Exit
status 1 when any case fails or raises, 0 otherwise.

Without a GPU the table, tolerances and exit status are the same: what a
CPU-only installation runs. It runs the float32 and integer cases (the
float16 tolerances are for one op on two devices, not against float64) and
the cases marked XLA_ONLY outside XLA as well; an op module may make its
large cases smaller there (its selftest_cases(cpu_only=True)).

On a CUDA GPU, TensorFlow keeps int32 tensors in host memory, so int32 cases
run on the host CPU there (the report says so); the float32 and int64 cases
check the CUDA kernel. TF32 is turned off for the run: some gradients go
through TensorFlow's own GPU ops.

The error of a case is the largest, over every output and gradient element,
of |device - reference| / max(1, |reference|); NaN where the other side has a
number, a missing gradient or a shape mismatch count as infinite. A case may
bring its own comparison (compare: an op whose outputs are discrete
decisions that one ulp of rounding can flip) or its own check in place of
the reference (check: a dtype without a CPU kernel, against a bound).

Where XLA can compile an op in this process (metal_ops._loader.has_xla_kernels:
host handlers, and CUDA handlers where a GPU is listed), the ops with XLA
kernels run every case a second time inside tf.function(jit_compile=True)
(the case's label ends in "[xla]"), compared with the same reference
(docs/XLA.md).

METAL_OPS_GPU_SYNC=1 is set before the op library is loaded: in that mode
every Metal op commits its command buffer, waits for it and turns a GPU-side
error into a TensorFlow error naming the op and kernel, so a fault shows up
in the case that caused it. On a Mac, run it with Metal's shader validation:

    MTL_SHADER_VALIDATION=1 python -m metal_ops.selftest --json report.json

`--json FILE` writes the table with the versions of TensorFlow,
tensorflow-metal, the OS, the devices and this build, to attach to a bug
report. It needs only the installed package (no tests/ folder).
"""
import argparse
import collections
import functools
import json
import math
import os
import platform
import sys
import time
import zlib

import numpy as np

SYNC_ENV = "METAL_OPS_GPU_SYNC"

XLA_ONLY = "only"  # a case's xla: run under XLA only (see case())

Case = collections.namedtuple("Case", "op label dtype inputs call tolerance attrs differentiable check compare xla")


def case(op, label, dtype, inputs, call, tolerance, attrs=None, differentiable=True, check=None, compare=None,
         xla=True):
    """One case of `op`: call(*inputs) with the attributes `attrs` (for the
    NumPy reference), forward and, when `differentiable`, its gradients.
    check: None, or (case, outputs, gradients) -> (error, note) in place of the
    reference; compare: None (max_error), or (got, want, names, tolerance) ->
    (error, note) against the reference; xla: True (again under XLA where the
    op has XLA kernels), False (not under XLA), or XLA_ONLY (on a GPU under XLA
    only; on a machine without one outside XLA as well)."""
    return Case(op, label, np.dtype(dtype).name, inputs, call, tolerance, attrs or {}, differentiable, check, compare,
                xla)


def rng(op):
    """The generator of an op's inputs: its own, so that they are the same
    whichever ops are selected."""
    return np.random.default_rng(zlib.crc32(op.encode()))


def rays(rng, r, s):
    """sigma [r, s], rgb [r, s, 3] and sorted t [r, s + 1] of r rays of s samples."""
    sigma = rng.uniform(0, 5, (r, s)).astype(np.float32)
    rgb = rng.uniform(0, 1, (r, s, 3)).astype(np.float32)
    t = np.cumsum(rng.uniform(0.01, 0.1, (r, s + 1)), axis=1).astype(np.float32)
    return sigma, rgb, t


# ---- the cases -------------------------------------------------------------------------------

def op_modules():
    """{name: module} of the package's modules that declare self-test cases: a
    function selftest_cases(cpu_only) giving their ops' cases (made with
    case()), and optionally XLA_GRADIENT_OPS, {TensorFlow op: its gradient op}
    for an op whose gradient op is not <op>Grad. Adding an op adds its
    module; no list here names it."""
    import importlib
    import pkgutil

    import metal_ops

    found = {}
    for info in sorted(pkgutil.iter_modules(metal_ops.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"metal_ops.{info.name}")
        if callable(getattr(module, "selftest_cases", None)):
            found[info.name] = module
    return found


def cases(ops=None, cpu_only=False):
    """Every case, in table order (by op module); `ops` limits them to those op
    names. `cpu_only`: the cases of a machine without a GPU (see above): no
    float16, and the XLA_ONLY cases outside XLA too."""
    from metal_ops import _loader

    selected = [c for module in op_modules().values() for c in module.selftest_cases(cpu_only=cpu_only)
                if ops is None or c.op in ops]
    if cpu_only:
        selected = [c for c in selected if c.dtype != "float16"]
    plain = [c for c in selected if cpu_only or c.xla != XLA_ONLY]
    with_xla = xla_ops()
    return plain + [under_xla(c) for c in selected
                    if c.xla and c.op in with_xla and c.dtype != "int32" and _loader.has_xla_kernels(with_xla[c.op])]


@functools.lru_cache(maxsize=None)
def xla_ops():
    """The ops with XLA kernels in this process (docs/XLA.md), by self-test op:
    {op: (its TensorFlow op, its gradient op where that has XLA kernels too)}.
    Each of their cases runs again inside tf.function(jit_compile=True),
    forward and gradients, against the same CPU reference, but for int32
    cases (TensorFlow keeps int32 on the host) and cases marked xla=False.

    Read from TensorFlow's kernel registry: the library's ops (its generated
    wrappers, MetalOps<Name> beside metal_ops_<name>) with an XLA_CPU_JIT
    kernel, which XLA lists there from its first compilation in the process
    on. Empty where the library registered none (metal_ops._loader.xla_status:
    the macOS build, a registration refused or too late); where TensorFlow
    lists a GPU, metal_ops._loader.has_xla_kernels says which have CUDA
    handlers."""
    from metal_ops import _loader

    library = _loader.load_library()
    if not _loader.xla_status()[0]:
        return {}
    import tensorflow as tf
    from tensorflow.python.framework import kernels

    tf.function(lambda: tf.zeros([]), jit_compile=True)()  # XLA lists its kernels from its first compilation on
    snake = {}  # TensorFlow op -> the self-test's name of it: MetalOps<Name> -> <name>
    for name in dir(library):
        if not name.startswith("_") and name.islower():
            for op in (n for n in dir(library) if n.lower() == name.replace("_", "") and n != name):
                snake[op] = name.removeprefix("metal_ops_")
    with_xla = {op for op in snake
                if any(k.device_type == "XLA_CPU_JIT" for k in kernels.get_registered_kernels_for_op(op).kernel)}
    gradients = {}  # the gradient ops that are not <op>Grad, as the op modules declare them
    for module in op_modules().values():
        gradients.update(getattr(module, "XLA_GRADIENT_OPS", {}))
    out = {}
    for op in sorted(with_xla):
        gradient = gradients.get(op, op + "Grad")
        if not op.endswith("Grad"):
            out[snake[op]] = (op, gradient) if gradient in with_xla else (op,)
    return out


XLA_LABEL = " [xla]"  # the end of an [xla] case's label


def under_xla(case):
    import tensorflow as tf

    return case._replace(label=case.label + XLA_LABEL, call=tf.function(case.call, jit_compile=True))


def _plain_label(case):
    """The label of the case an [xla] case repeats (its own for any other)."""
    return case.label.removesuffix(XLA_LABEL)


# ---- running and comparing -------------------------------------------------------------------

def cotangents(case, shapes):
    """Fixed random cotangents for outputs of these shapes (the same on every
    device, and for a case and its [xla] case)."""
    rng = np.random.default_rng(zlib.crc32(f"{case.op} {_plain_label(case)} {case.dtype}".encode()))
    return [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]


def execute(case, device, repeat=1):
    """Runs the case on `device`: (outputs, gradients, devices the outputs were placed on, seconds).

    Seconds: the fastest of `repeat` runs after one warm-up run, each a forward
    and backward pass with every result copied back to NumPy.
    """
    import tensorflow as tf

    def once():
        with tf.device(device):
            tensors = [tf.constant(a) for a in case.inputs]
            with tf.GradientTape() as tape:
                if case.differentiable:  # integer inputs have no gradient: watching them only warns
                    tape.watch([t for t in tensors if t.dtype.is_floating])
                outputs = [o for o in tf.nest.flatten(case.call(*tensors)) if o is not None]
                if case.differentiable:
                    cots = cotangents(case, [o.shape for o in outputs])
                    loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32) * c) for o, c in zip(outputs, cots)])
            grads = []
            if case.differentiable:
                floating = [t for t in tensors if t.dtype.is_floating]
                found = iter(tape.gradient(loss, floating))
                grads = [next(found) if t.dtype.is_floating else None for t in tensors]
        values = [o.numpy() for o in outputs]
        grad_values = [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads]
        return values, grad_values, [o.device for o in outputs]

    once()
    best = math.inf
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        values, grad_values, placed = once()
        best = min(best, time.perf_counter() - start)
    return values, grad_values, placed, best


# A case's reference results, kept until its [xla] case (the same inputs and
# cotangents) takes them, by (id of its inputs, op, label, dtype).
_REFERENCE_RESULTS = {}


def numpy_reference(case, repeat=1):
    """(outputs, gradients of sum(cotangent * output), None) of a case from its
    op's independent NumPy reference (metal_ops._reference)."""
    from metal_ops import _reference

    key = (id(case.inputs), case.op, _plain_label(case), case.dtype)
    if key in _REFERENCE_RESULTS:
        outs, grads = _REFERENCE_RESULTS.pop(key)[1]
    else:
        outs, grads = _reference.references()[case.op](case.inputs, case.attrs)
        cots = cotangents(case, [np.shape(o) for o in outs])
        grads = grads(cots) if case.differentiable else []
        if case.op in xla_ops() and not case.label.endswith(XLA_LABEL):
            _REFERENCE_RESULTS[key] = (case.inputs, (outs, grads))  # the inputs held: their id stays theirs
    return list(outs), list(grads), None


def cpu_reference(case, repeat=1):
    """The same op on the CPU: (outputs, gradients, seconds)."""
    values, grads, _, seconds = execute(case, "/CPU:0", repeat=repeat)
    return values, grads, seconds


def max_error(got, want, names=None):
    """Largest |got - want| / max(1, |want|) over the arrays (inf on a mismatch),
    and which array (`names`, else its index) it was found in."""
    worst, note = 0.0, ""
    for k, (a, b) in enumerate(zip(got, want)):
        k = names[k] if names else f"result {k}"
        if a is None or b is None:
            if (a is None) != (b is None):
                return math.inf, f"{k}: {'missing' if a is None else 'unexpected'} on the device"
            continue
        a = np.asarray(a)
        b = np.asarray(b)
        if a.shape != b.shape:
            return math.inf, f"{k}: shape {a.shape} on the device, {b.shape} expected"
        if a.size == 0:
            continue
        a = a.astype(np.float64)
        b = b.astype(np.float64)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if np.any(nan_a != nan_b):
            return math.inf, f"{k}: NaN at {int(np.sum(nan_a != nan_b))} positions on one side only"
        both = ~nan_a
        with np.errstate(invalid="ignore"):
            diff = np.where(a[both] == b[both], 0.0, np.abs(a[both] - b[both]))
        err = float(np.max(diff / np.maximum(1.0, np.abs(b[both])), initial=0.0))
        if not err <= worst:
            worst, note = err, f"largest in {k}"
    if len(got) != len(want):
        return math.inf, f"{len(got)} results on the device, {len(want)} expected"
    return worst, note


def error_note(e):
    """A failed case's note: the error's first line and, where tf.function
    wrapped it ("in user code:" and a traceback), its last, which says what
    went wrong."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    text = " ... ".join(lines[:1] + lines[-1:]) if len(lines) > 1 else "".join(lines)
    return f"{type(e).__name__}: {text}"[:400]


def run_case(case, device, reference, repeat):
    row = {"op": case.op, "case": case.label, "dtype": case.dtype, "device": device, "gradients": case.differentiable,
           "tolerance": case.tolerance, "error": None, "passed": False, "note": "",
           "device_ms": None, "reference_ms": None}
    try:
        values, grads, placed, seconds = execute(case, device, repeat=repeat)
        row["device_ms"] = seconds * 1e3
        if case.check is not None:
            error, note = case.check(case, values, grads)
        else:
            want_values, want_grads, ref_seconds = reference(case, repeat)
            row["reference_ms"] = None if ref_seconds is None else ref_seconds * 1e3
            names = [f"output {i}" for i in range(len(values))] + [f"gradient of input {i}" for i in range(len(grads))]
            got, want = values + grads, list(want_values) + list(want_grads)
            error, note = (case.compare(got, want, names, case.tolerance) if case.compare
                           else max_error(got, want, names))
        row["error"], row["note"] = error, note
        import tensorflow as tf

        kind = expected_device_type(case, tf.DeviceSpec.from_string(device).device_type)
        wrong_place = [p for p in placed if tf.DeviceSpec.from_string(p).device_type != kind]
        if wrong_place:
            row["note"] = f"ran on {wrong_place[0]}, not {device}"
        elif kind != tf.DeviceSpec.from_string(device).device_type:
            row["note"] = HOST_INT32_NOTE
        row["passed"] = error <= case.tolerance and not wrong_place
    except Exception as e:  # a TF error (a GPU fault in sync mode) fails the case, not the run
        row["note"] = error_note(e)
    return row


HOST_INT32_NOTE = "int32 runs on the host CPU: TensorFlow keeps int32 tensors in host memory on a CUDA GPU"


def expected_device_type(case, device_type, platform=None):
    """Where a case's op must run when asked for `device_type`: int32 on a
    CUDA GPU stays on the host CPU, as TensorFlow's own int32 ops do (a Metal
    kernel registered for int32 keeps it on the Metal GPU)."""
    platform = sys.platform if platform is None else platform
    if device_type == "GPU" and case.dtype == "int32" and platform != "darwin":
        return "CPU"
    return device_type


def gpu_devices():
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices("GPU")]


def run(devices=None, reference=None, ops=None, repeat=3, selected=None, progress=None):
    """[row] for every case on every device (GPUs TensorFlow lists by default),
    compared with `reference` (the CPU op by default)."""
    os.environ.setdefault(SYNC_ENV, "1")
    import tensorflow as tf

    from metal_ops import load_library

    # The gradients of some cases go through TensorFlow's own GPU ops (the
    # convolution's backprops), which use TF32 by default on NVIDIA GPUs: full
    # float32 here, so the comparison measures this library's kernels.
    tf.config.experimental.enable_tensor_float_32_execution(False)
    load_library()
    devices = gpu_devices() if devices is None else devices
    reference = reference or cpu_reference
    rows = []
    # Each [xla] case is a tf.function of its own, traced once: TensorFlow counts
    # those of one op module's lambdas as one function retracing and warns.
    logger, quiet = tf.get_logger(), _NoRetracingWarning()
    logger.addFilter(quiet)
    try:
        for case in selected if selected is not None else cases(ops):
            for device in devices:
                rows.append(run_case(case, device, reference, repeat))
                if progress:
                    progress(rows[-1])
    finally:
        logger.removeFilter(quiet)
    return rows


class _NoRetracingWarning:
    """A logging filter that drops TensorFlow's "triggered tf.function retracing" warning."""

    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


# ---- report --------------------------------------------------------------------------------

def _fmt(value, spec):
    return "-" if value is None else ("inf" if value == math.inf else format(value, spec))


def _differentiable(row):
    return row.get("gradients", True)


def format_table(rows):
    header = ["op", "case", "dtype", "device", "max error", "tolerance", "result", "device ms", "cpu ms", "note"]
    body = [[r["op"], r["case"] + ("" if _differentiable(r) else " (forward)"), r["dtype"],
             r["device"].replace("/device:", ""), _fmt(r["error"], ".2e"), _fmt(r["tolerance"], ".0e"),
             "pass" if r["passed"] else "FAIL", _fmt(r["device_ms"], ".2f"), _fmt(r["reference_ms"], ".2f"),
             "" if r["passed"] else r["note"]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = []
    for line in [header] + body:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    return "\n".join(lines)


def environment():
    import tensorflow as tf

    from metal_ops import build_info

    try:
        from importlib import metadata

        metal = metadata.version("tensorflow-metal")
    except Exception:
        metal = None
    devices = []
    for d in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(d)
        except Exception:
            details = {}
        devices.append({"name": d.name, "details": {k: str(v) for k, v in details.items()}})
    return {
        "tensorflow": tf.__version__,
        "tensorflow_metal": metal,
        "os": platform.platform(),
        "mac_ver": platform.mac_ver()[0] or None,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "gpu_devices": devices,
        "metal_ops_build": build_info(),
        "env": {k: os.environ.get(k) for k in (SYNC_ENV, "MTL_SHADER_VALIDATION", "MTL_DEBUG_LAYER",
                                               "MPS_MAX_COMMIT_COUNT") if k in os.environ},
    }


def what_it_tests(backends, system=None):
    """The --help text for a build of these backends on this system: what the
    self-test runs here, with a GPU device and without one."""
    system = sys.platform if system is None else system
    without = ("on /CPU:0, every op's CPU kernels against the float64 NumPy references the package ships "
               "(metal_ops._reference), and again under XLA for the ops with XLA kernels")
    if system == "darwin":
        return ("On this Mac: where TensorFlow lists a Metal GPU device (tensorflow-metal installed), every op on it "
                f"against the same op on the CPU; where it lists none, {without} (the macOS build has none).")
    if "cuda" in backends:
        return ("On this machine: where TensorFlow lists a CUDA GPU, every op on each GPU device against the same op "
                f"on the CPU, and again under XLA; where it lists none, {without}.")
    return (f"This build has no GPU kernels (backends: {', '.join(backends) or 'none'}): it runs {without}, "
            "whatever GPU TensorFlow lists.")


def no_gpu_message(backends, system=None):
    """What the self-test says where TensorFlow lists no GPU device."""
    system = sys.platform if system is None else system
    if system == "darwin":
        why = "TensorFlow lists no Metal GPU device (pip install tensorflow-metal, see README)"
    elif "cuda" in backends:
        why = "TensorFlow lists no CUDA GPU (docs/BUILDING.md, \"TensorFlow's CUDA build\")"
    else:
        why = f"this build has CPU kernels only (backends: {', '.join(backends) or 'none'})"
    return (f"metal_ops.selftest: {why}: the CPU kernels on /CPU:0 against the independent float64 NumPy "
            "references the package ships (metal_ops._reference).")


def count(selected):
    """(cases outside XLA, [xla] cases) of a case list."""
    xla = sum(c.label.endswith(XLA_LABEL) for c in selected)
    return len(selected) - xla, xla


def main(argv=None, devices=None, reference=None, selected=None):
    """The command line. `devices`, `reference` and `selected` (cases) replace
    the GPUs, the CPU reference and the case list (for this package's tests)."""
    from metal_ops import _loader

    backends = (_loader.read_build_info() or {}).get("backends", [])
    parser = argparse.ArgumentParser(prog="python -m metal_ops.selftest", description=(
        "Checks every op of this library against a reference. " + what_it_tests(backends)
        + " Exit status 1 when a case fails."))
    parser.add_argument("--json", metavar="FILE", help="write the report (table and environment) to FILE")
    parser.add_argument("--ops", help="comma-separated op names (default: every op)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case and device (default 3)")
    parser.add_argument("--list", action="store_true", help="print the cases this machine runs and their count, "
                                                            "without running them")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    os.environ.setdefault(SYNC_ENV, "1")
    import tensorflow as tf  # noqa: F401  (after the environment variable)

    if devices is None:  # a build without GPU kernels checks its CPU kernels, whatever TensorFlow lists
        devices = gpu_devices() if {"cuda", "metal"} & set(backends) else []
    ops = set(args.ops.split(",")) if args.ops else None
    if ops is not None and selected is None:
        known = {c.op for c in cases()}
        if ops - known:
            parser.error(f"--ops: no op named {', '.join(sorted(ops - known))} (the ops: {', '.join(sorted(known))})")
    if not devices:
        reference = reference or numpy_reference
        if selected is None:
            selected = cases(ops, cpu_only=True)
    if args.list:
        listed = selected if selected is not None else cases(ops)
        for c in listed:
            print(f"{c.op}  {c.label}  {c.dtype}")
        plain, xla = count(listed)
        print(f"metal_ops.selftest: {len(listed)} cases on each of {', '.join(devices or ['/CPU:0'])}: "
              f"{plain} outside XLA, {xla} under XLA")
        return 0
    env = environment()
    metal = f"tensorflow-metal {env['tensorflow_metal'] or '-'}, " if sys.platform == "darwin" else ""
    print(f"metal_ops.selftest: TensorFlow {env['tensorflow']}, {metal}"
          f"{env['os']}, backends {env['metal_ops_build'].get('backends')}, {SYNC_ENV}={os.environ.get(SYNC_ENV)}")
    if not devices:
        print(no_gpu_message(backends))
        devices = ["/CPU:0"]
    print(f"metal_ops.selftest: devices {', '.join(devices)}")
    rows = run(devices, reference, ops, args.repeat, selected)
    print(format_table(rows))
    failed = [r for r in rows if not r["passed"]]
    passed = not failed
    summary = (f"metal_ops.selftest: {len(rows) - len(failed)} of {len(rows)} cases passed"
               if rows else "metal_ops.selftest: no cases run")
    print(summary + ("" if passed else f"; {len(failed)} FAILED"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"passed": passed, "environment": env, "devices": devices,
                       "results": [{k: (None if v == math.inf else v) if k == "error" else v for k, v in r.items()}
                                   | {"error_is_inf": r["error"] == math.inf} for r in rows]},
                      f, indent=2, default=str)
        print(f"metal_ops.selftest: report written to {args.json}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
