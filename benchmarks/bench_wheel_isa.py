"""The portable wheel's CPU kernels against the -march=native build.

    make && make isa-libs          # both kinds of library in python/metal_ops
    flock /tmp/tfmo-bench.lock python -m benchmarks.bench_wheel_isa [--rounds 5] [--level x86-64-v3] [--ops fused_conv2d,...]

The workloads of the CPU benchmarks (benchmarks/bench_<op>.py: each op forward
+ backward in a tf.function, at their default sizes) timed with the op library
built for one x86-64 level (what the wheel loads on this CPU, METAL_OPS_ISA) and
with the -march=native one (METAL_OPS_ISA=native). Two libraries that register
the same ops cannot share a process, so each measurement is a child process;
rounds alternate the two (native, level, native, level, ...) and the ratio per
op is the median over rounds of the per-round ratios (machine load drifts).
JSON in benchmarks/results/wheel_isa.cpu.json (with --against, an A/B rather
than a reference figure: builds_ab.cpu.json in the temporary folder).

`--against DIR` compares two -march=native builds the same way instead: this
tree's library against the metal_ops package in DIR (another checkout's
python/, built with `make` there), e.g. before and after a refactoring:

    flock /tmp/tfmo-bench.lock python -m benchmarks.bench_wheel_isa --against /work/old/python \
        --rounds 9
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, os, statistics, sys, time
import numpy as np
import tensorflow as tf
import metal_ops
from metal_ops import _loader

rng = np.random.default_rng(0)
reps = int(sys.argv[1])
only = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else None


def fb(fn, *xs):
    xs = [tf.constant(x) for x in xs]

    @tf.function
    def step(*xs):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = fn(*xs)
            loss = tf.add_n([tf.reduce_sum(t) for t in tf.nest.flatten(y)])
        return tape.gradient(loss, xs)
    return lambda: [g.numpy() for g in step(*xs) if g is not None]


f32 = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
dims = [31, 64, 64, 3]
ks = [(f32(a, b) / np.sqrt(a)).astype(np.float32) for a, b in zip(dims[:-1], dims[1:])]
bs = [f32(b) * 0.1 for b in dims[1:]]
table_rows = metal_ops.hash_grid_size(3, 16, 19, 16, 1.447)
work = {
    "fused_mlp": fb(lambda x, *p: metal_ops.fused_mlp(x, list(p[:3]), list(p[3:]), output_activation="sigmoid"),
                    f32(98304, 31), *ks, *bs),
    "hash_encode": fb(lambda x, t: metal_ops.hash_encode(x, t, num_levels=16, log2_hashmap_size=19,
                                                         base_resolution=16, per_level_scale=1.447),
                      rng.uniform(0, 1, (1 << 18, 3)).astype(np.float32), f32(table_rows, 2) * 1e-2),
    "robust_loss": fb(lambda x: metal_ops.robust_loss(x, 1.0, 0.5), f32(1 << 22)),
    "volume_render": fb(lambda s, c, t: metal_ops.volume_render(s, c, t)[:3],
                        rng.uniform(0, 5, (4096, 64)).astype(np.float32), rng.uniform(0, 1, (4096, 64, 3)).astype(np.float32),
                        np.sort(rng.uniform(2, 6, (4096, 65)), axis=1).astype(np.float32)),
    "sh_encode": fb(lambda d: metal_ops.sh_encode(d, degree=4),
                    (lambda d: d / np.linalg.norm(d, axis=1, keepdims=True))(f32(1 << 18, 3))),
    "distortion_loss": fb(metal_ops.distortion_loss, rng.uniform(0, 1, (4096, 64)).astype(np.float32),
                          np.sort(rng.uniform(0, 1, (4096, 65)), axis=1).astype(np.float32)),
    "fused_conv2d": fb(lambda x, w, b: metal_ops.fused_conv2d(x, w, b, activation="relu"),
                       f32(8, 32, 32, 64), f32(3, 3, 64, 64) * 0.05, f32(64)),
}
out = {"isa": _loader.isa_info()["running"], "library": _loader.library_path(), "ms": {}}
for name, fn in work.items():
    if only is not None and name not in only:
        continue
    fn(); fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); times.append((time.perf_counter() - t0) * 1e3)
    out["ms"][name] = statistics.median(times)
print("RESULT " + json.dumps(out))
'''


def child(level, reps, ops, pythonpath=None):
    env = dict(os.environ, METAL_OPS_ISA=level, TF_CPP_MIN_LOG_LEVEL="3")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([sys.executable, "-c", CHILD, str(reps), ",".join(ops)], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"bench_wheel_isa: the {level} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))[7:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=9, help="timed calls per op per child")
    parser.add_argument("--ops", default="", help="comma-separated subset of the workloads (default: all)")
    parser.add_argument("--against", default=None, metavar="DIR",
                        help="compare with the -march=native metal_ops package in DIR instead of a portable level")
    parser.add_argument("--level", default=None, help="the portable level (default: what the wheel picks here)")
    parser.add_argument("--out", default=None,
                        help="the JSON (default benchmarks/results/wheel_isa.cpu.json; with --against "
                             "builds_ab.cpu.json in the temporary folder)")
    args = parser.parse_args()
    from metal_ops import _loader

    info = _loader.read_build_info() or {}
    ops = [o for o in args.ops.split(",") if o]
    if args.against:
        if not os.path.isdir(os.path.join(args.against, "metal_ops")):
            sys.exit(f"bench_wheel_isa: --against {args.against}: no metal_ops package there")
        level = "against"
    else:
        if not info.get("library") or not info.get("isa_libraries"):
            sys.exit("bench_wheel_isa: needs both the -march=native library and the per-level ones: "
                     "make && make isa-libs")
        level = args.level or [l for l in _loader.cpu_isa_levels() if l in info["isa_libraries"]][-1]
    load_before = timing.load_average()
    runs = {"native": [], level: []}
    libraries = {}
    for r in range(args.rounds):
        for variant in ("native", level):
            if variant == "against":
                res = child("native", args.reps, ops, pythonpath=os.path.abspath(args.against))
            else:
                res = child(variant, args.reps, ops)
                assert res["isa"] == variant, res
            libraries[variant] = res["library"]
            runs[variant].append(res["ms"])
    if args.against and os.path.realpath(libraries["native"]) == os.path.realpath(libraries["against"]):
        sys.exit(f"bench_wheel_isa: both sides loaded {libraries['native']}")
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{op} {runs[level][-1][op] / runs['native'][-1][op]:.3f}" for op in runs["native"][-1]), flush=True)
    # The ratio is the other library's time over this tree's -march=native one.
    ratio_key = "ratio_against_over_this" if args.against else "ratio_portable_over_native"
    ratio_label = "against/this" if args.against else "portable/native"
    results = {}
    for op in runs["native"][0]:
        ratios = [p[op] / n[op] for n, p in zip(runs["native"], runs[level])]
        results[op] = {"native_ms": statistics.median(n[op] for n in runs["native"]),
                       f"{level}_ms": statistics.median(p[op] for p in runs[level]),
                       ratio_key: statistics.median(ratios),
                       "ratios": ratios}
        print(f"{op:16s} native {results[op]['native_ms']:8.2f} ms  {level} {results[op][f'{level}_ms']:8.2f} ms  "
              f"{ratio_label} {results[op][ratio_key]:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
    default = (os.path.join(tempfile.gettempdir(), "builds_ab.cpu.json") if args.against
               else timing.result_path("wheel_isa"))
    timing.write_json(args.out or default, {
        "command": " ".join([os.path.basename(sys.executable), "-m", "benchmarks.bench_wheel_isa"] + sys.argv[1:]),
        "level": level, "libraries": libraries,
        "tune": info.get("isa_tune"), "load_average_before": load_before, "load_average_after": timing.load_average(),
        "method": "child process per measurement, the two libraries alternating, median of per-round ratios",
        "results": results})

if __name__ == "__main__":
    main()
