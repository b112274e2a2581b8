"""Timing for the benchmarks: variants side by side in one process.

Each round runs every variant once, in turn, so a ratio compares calls made
under the same machine conditions (a shared machine's load drifts over the
minutes a benchmark takes); speedups are medians of the per-round ratios.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def interleaved_ms(fns, rounds, warmup=1):
    """{name: [(wall ms, process CPU ms) per round]} for the named callables."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times[name].append(((time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3))
    return times


def median_wall_ms(samples):
    return statistics.median(w for w, _ in samples)


def median_ratio(slow, fast):
    """Median over rounds of slow / fast wall time (> 1: `fast` is faster)."""
    return statistics.median(s[0] / f[0] for s, f in zip(slow, fast))


def ours_vs_composite(ours, composite, args, rounds):
    """ours(*args) against composite(*args), interleaved, outputs fetched:
    the row fields load_average, ours_ms, composite_ms and speedup (the
    median ratio composite / ours)."""
    def fetch(fn):
        return lambda: [v.numpy() for v in fn(*args)]
    times = interleaved_ms({"ours": fetch(ours), "composite": fetch(composite)}, rounds)
    return {"load_average": load_average(), "ours_ms": median_wall_ms(times["ours"]),
            "composite_ms": median_wall_ms(times["composite"]),
            "speedup": median_ratio(times["composite"], times["ours"])}


def result_path(benchmark, device="cpu"):
    """benchmarks/results/<benchmark>.<device>.json: the one current result
    file of a benchmark on a kind of device ('cpu', 'h100', ...)."""
    return os.path.join(RESULTS, f"{benchmark}.{device}.json")


def device_label(name=None):
    """The device part of a result file's name: 'cpu' without a GPU name, else
    the GPU's model in lower case ('h100' for 'NVIDIA H100 80GB HBM3')."""
    if not name or name.startswith("CPU"):
        return "cpu"
    name = name.removeprefix("GPU: ").split(",")[0]
    model = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    if model:
        return model.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "_", name.lower().removeprefix("nvidia ")).strip("_") or "gpu"


def arguments(benchmark, rounds, quick_help, out="--json", device="cpu"):
    """The command line of a benchmark: --quick, --rounds (interleaved rounds,
    default `rounds`) and `out`, the JSON written, by default
    result_path(benchmark, device); with device=None it defaults to None, for a
    benchmark that learns its device later."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds")
    parser.add_argument(out, default=result_path(benchmark, device) if device else None,
                        help="the JSON written (default benchmarks/results/<benchmark>.<device>.json)")
    return parser


def gpu_arguments(benchmark, rounds, quick_help, iters_help):
    """The command line of a GPU benchmark through TensorFlow: arguments()
    (no default JSON: the device is learnt later), --iters (calls per round,
    `iters_help`) and --no-tf32; tf_gpu_setup reads them."""
    parser = arguments(benchmark, rounds, quick_help + ", 3 rounds of 2 calls, no JSON (any device)", device=None)
    parser.add_argument("--iters", type=int, default=20, help=iters_help)
    parser.add_argument("--no-tf32", action="store_true", help="strict float32 on both sides")
    return parser


def run_configs(benchmark, configs, bench, rounds=9):
    """The main() of a CPU benchmark over configurations, bench(*config,
    rounds, results) each: --quick runs the first with 3 rounds and writes
    nothing; else all of them, the rows written to --json."""
    args = arguments(benchmark, rounds, "one small configuration, 3 rounds").parse_args()
    print(cpu_description())
    results = []
    for config in configs[:1] if args.quick else configs:
        bench(*config, 3 if args.quick else args.rounds, results)
    if not args.quick:
        write_json(args.json, {"rows": results})


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def cpu_description():
    """The CPU model and its widest x86 vector extensions (or the machine), for benchmark output."""
    model, isa = _cpu_info()
    return f"CPU: {model}, {os.cpu_count()} threads, ISA: {' '.join(isa)}"


def tf_gpu_setup(tf, metal_ops, script, args, **fields):
    """(device, header) of a benchmark through TensorFlow on its GPU, with
    gpu_arguments' `args`: /GPU:0, or with --quick whatever TensorFlow has (the
    CPU without a GPU; else it exits naming `script`). --no-tf32 turns TF32 off
    first. The header (printed) names the device, TensorFlow, whether TF32 is
    allowed, the library's backends, rounds and iters (3 and 2 with --quick)
    and `fields`."""
    if args.no_tf32:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    quick = args.quick
    fields = {"rounds": 3 if quick else args.rounds, "iters": 2 if quick else args.iters, **fields}
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and not quick:
        raise SystemExit(f"{script}: TensorFlow sees no GPU (a CUDA build on a GPU machine is needed; "
                         "--quick runs on the CPU)")
    device = "/GPU:0" if gpus else "/CPU:0"
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        cc = details.get("compute_capability")
        name = f"GPU: {details.get('device_name', '?')}" + (f", compute capability {cc[0]}.{cc[1]}" if cc else "")
    else:
        name = cpu_description()
    metal_ops.load_library()
    info = metal_ops.build_info()
    header = {"device": name, "tensorflow": tf.__version__,
              "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
              "metal_ops_backends": info["backends"], "cuda_library_loaded": bool(info["cuda"]["loaded"]), **fields}
    for key, value in header.items():
        print(f"{key}: {value}")
    return device, header


def command_line():
    """How this process was started, as `python -m benchmarks.<name> args`
    when it runs a module of this tree."""
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if script.endswith(".py") and script.startswith(ROOT + os.sep):
        module = os.path.relpath(script, ROOT)[:-3].replace(os.sep, ".")
        return " ".join(["python", "-m", module] + sys.argv[1:])
    return " ".join(sys.argv)


def source_commit(root=ROOT):
    """The tree's commit (`git describe --always`), '+dirty' when a tracked
    file differs from it; 'unknown' outside git. METAL_OPS_SOURCE_COMMIT
    names it instead, for a copy of the tree whose git folder is not its own
    (a GPU machine that gets the files alone)."""
    if os.environ.get("METAL_OPS_SOURCE_COMMIT"):
        return os.environ["METAL_OPS_SOURCE_COMMIT"]
    try:
        run = lambda *a: subprocess.run(["git", "-C", root, *a], capture_output=True, text=True,
                                        timeout=20, check=True).stdout.strip()
        commit = run("describe", "--always", "--abbrev=7")
        dirty = run("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def _cpu_info():
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx512f", "avx2", "fma", "sse4_2") if f in flags] or [platform.machine()]
    return model or platform.processor() or platform.machine(), isa


def _package_version(*names):
    from importlib import metadata
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine(gpu=None):
    """Where a benchmark ran: the CPU model, its widest x86 vector extensions
    and core count, the GPU's name (`gpu`, else nvidia-smi's first GPU, else
    None), the TensorFlow and Python versions."""
    model, isa = _cpu_info()
    if gpu is None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            gpu = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            gpu = None
    tf = sys.modules.get("tensorflow")
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(), "gpu": gpu,
            "tensorflow": getattr(tf, "__version__", None) or _package_version("tensorflow", "tensorflow-cpu"),
            "python": platform.python_version()}


def library_version(root=ROOT):
    """The version of the library in the tree (metal_ops.__version__, read
    from its source without importing it), or 'unknown'."""
    try:
        with open(os.path.join(root, "python", "metal_ops", "__init__.py"), encoding="utf-8") as f:
            match = re.search(r'^__version__ = "([^"]+)"', f.read(), flags=re.M)
    except OSError:
        return "unknown"
    return match.group(1) if match else "unknown"


def write_json(path, data):
    """Writes a benchmark's result file to path, creating its folder. A dict
    gets the fields every result file holds first: benchmark and device (from
    a <benchmark>.<device>.json name), command, commit, the library's version
    (library_version()), date (UTC) and machine
    (machine(); a 'device' naming the GPU and a 'machine' dict of the data are
    folded into it); then the benchmark's figures, the rest of `data`."""
    if isinstance(data, dict):
        data = dict(data)
        name = data.pop("device", None)
        gpu = name.removeprefix("GPU: ") if isinstance(name, str) and not name.startswith("CPU") else None
        where = machine(gpu)
        extra = data.pop("machine", None)
        if isinstance(extra, dict):
            where.update({k: v for k, v in extra.items() if k not in where})
        for key in ("cpu", "cpus"):
            data.pop(key, None)
        head = {}
        base = os.path.basename(path)
        parts = base[:-len(".json")].split(".") if base.endswith(".json") else []
        if len(parts) == 2:
            head = {"benchmark": parts[0], "device": parts[1]}
        head.update({"command": data.pop("command", None) or command_line(), "commit": source_commit(),
                     "version": library_version(),
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "machine": where})
        data = {**head, **data}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print("wrote", path)


def median_ms(fn, repeats, warmup=1):
    """(median wall ms, median process CPU ms) of `repeats` calls of fn. On a
    shared machine the CPU time (all threads of this process) is the steadier
    figure: it does not count time spent waiting for a core."""
    samples = interleaved_ms({"fn": fn}, repeats, warmup)["fn"]
    return median_wall_ms(samples), statistics.median(c for _, c in samples)


def cuda_median_ms(gpu, fn, repeats=30, warmup=5, batch=1):
    """Median GPU time (ms per call, CUDA events on the current stream) of fn(),
    from `repeats` samples of `batch` back-to-back calls. gpu: the torch or
    cupy module whose stream fn() uses."""
    if gpu.__name__ == "torch":
        event, elapsed = (lambda: gpu.cuda.Event(enable_timing=True)), (lambda s, e: s.elapsed_time(e))
    else:
        event, elapsed = gpu.cuda.Event, gpu.cuda.get_elapsed_time
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = event(), event()
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        times.append(elapsed(start, end) / batch)
    return statistics.median(times)


def cuda_peak_extra_mib(torch, fn):
    """GPU memory (MiB) that fn() allocates through PyTorch at its peak."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def junit_counts(path):
    """(counts, seconds, failures) of a pytest junit XML report."""
    import xml.etree.ElementTree as ET
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
    failures, seconds = [], 0.0
    for suite in suites:
        seconds += float(suite.get("time", 0))
        for case in suite.iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            tags = {child.tag for child in case}
            skipped = case.find("skipped")
            if "failure" in tags or "error" in tags:
                counts["failed"] += 1
                failures.append(name)
            elif skipped is not None:
                counts["xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"] += 1
            else:
                counts["passed"] += 1
    return counts, round(seconds, 3), failures


def first_gpu_name():
    """The model name of TensorFlow's first GPU, None when it lists none."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None


def record_main(argv=None):
    """python -m benchmarks.timing record BENCHMARK FILE [--device D] [--command C]:
    a report another program wrote (a JSON dict, or a pytest junit XML, kept as
    its counts) as benchmarks/results/<BENCHMARK>.<device>.json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.timing record")
    p.add_argument("benchmark")
    p.add_argument("file")
    p.add_argument("--device", default=None, help="default: the label of TensorFlow's first GPU, else cpu")
    p.add_argument("--command", default=None, help="the command that wrote FILE")
    p.add_argument("--results", default=RESULTS)
    a = p.parse_args(argv)
    if a.file.endswith(".xml"):
        counts, seconds, failures = junit_counts(a.file)
        data = {"counts": counts, "time_s": seconds, "failures": failures}
    else:
        with open(a.file) as f:
            data = json.load(f)
    data["command"] = a.command or data.get("command")
    gpu = None if a.device == "cpu" else first_gpu_name()
    if gpu:
        data["device"] = f"GPU: {gpu}"
    write_json(os.path.join(a.results, f"{a.benchmark}.{a.device or device_label(gpu)}.json"), data)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["record"]:
        raise SystemExit("usage: python -m benchmarks.timing record BENCHMARK FILE [--device D] [--command C]")
    sys.exit(record_main(sys.argv[2:]))
