"""A proxy for what the first call's `newLibraryWithSource:` costs per shader
library (docs/METAL_COMPAT.md, "The first call's compile"): clang, the
compiler Apple's Metal front end is built on, taking each embedded source
(build/gen/<library>.metal) to optimised LLVM IR, every kernel instantiation
in it, as C++ for OpenCL against tools/check/msl_check.py's stand-in
metal_stdlib. Not Apple's compiler: the numbers rank the libraries and show
how the cost grows with their instantiations; a Mac's milliseconds differ.

    .venv/bin/python -m tests.metal_shim.compile_cost [--repeat N]

Prints one markdown table: library, the median seconds of --repeat compiles
(3 by default) on this machine, and each one's share of the sum.
"""
import argparse
import glob
import os
import statistics
import subprocess
import tempfile
import time

from tools.check import msl_check


def compile_seconds(clang, path, repeat):
    """Median wall seconds of taking `path` to -O2 LLVM IR."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    flags = msl_check.clang_flags(msl_check.msl_version_of(text), msl_check.STDLIB_DIR)
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, os.path.basename(path))
        with open(source, "w", encoding="utf-8") as f:
            f.write(msl_check.without_instantiation_attributes(text))
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run([clang] + flags + ["-S", "-emit-llvm", "-O2", "-o", os.devnull, source], check=True,
                           capture_output=True)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    clang = msl_check.find_clang()
    if clang is None:
        raise SystemExit(msl_check.why_no_clang())
    paths = sorted(glob.glob(os.path.join(msl_check.ROOT, "build", "gen", "*.metal")))
    if not paths:
        raise SystemExit("build/gen has no embedded sources: run `make metal-shim`")
    rows = [(os.path.basename(p)[:-len(".metal")], compile_seconds(clang, p, args.repeat)) for p in paths]
    total = sum(seconds for _, seconds in rows)
    print("| library | seconds (clang, -O2 LLVM IR) | share |")
    print("| --- | --- | --- |")
    for name, seconds in sorted(rows, key=lambda r: -r[1]):
        print(f"| {name} | {seconds:.2f} | {100 * seconds / total:.0f}% |")


if __name__ == "__main__":
    main()
