"""A proxy for what a first call's `newLibraryWithSource:` costs per shader
library (docs/METAL_COMPAT.md, "The first call's compile"): clang, the
compiler Apple's Metal front end is built on, taking embedded sources
(build/gen/<library>.metal) to optimised LLVM IR as C++ for OpenCL against
tools/check/msl_check.py's stand-in metal_stdlib. Per library: the whole
source (every kernel instantiation in it), and each text the pipeline cache
compiles on a pipeline's first use (kernels/metal/pipeline_cache.h: the
library's body with one instantiation, or the body alone for its plain
kernels), the median and the largest of those. Not Apple's compiler, and
this machine, not a Mac: the numbers rank the libraries and show how the
cost grows with their instantiations; a Mac's milliseconds differ.

    .venv/bin/python -m tests.metal_shim.compile_cost [--repeat N]

Prints one markdown table: library, its compile texts, the median seconds of
--repeat compiles (3 by default) of the whole source, and of its per-kernel
texts the median and the largest (each text's median of --repeat compiles).
"""
import argparse
import glob
import os
import statistics
import subprocess
import tempfile
import time

from tests.metal_shim.kernel_table import KERNEL
from tools.check import msl_check


def compile_seconds(clang, name, text, repeat, tmp):
    """Median wall seconds of taking the MSL `text` to -O2 LLVM IR."""
    flags = msl_check.clang_flags(msl_check.msl_version_of(text), msl_check.STDLIB_DIR)
    source = os.path.join(tmp, name + ".metal")
    with open(source, "w", encoding="utf-8") as f:
        f.write(msl_check.without_instantiation_attributes(text))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([clang] + flags + ["-S", "-emit-llvm", "-O2", "-o", os.devnull, source], check=True,
                       capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compile_texts(text, name):
    """The texts the pipeline cache compiles for library `name` (its
    CompileText): the body with each instantiation alone, then the body alone
    when it has a plain kernel (one that is no template)."""
    spans = msl_check.instantiation_spans(text, name)

    def keeping(kept):
        out, at = [], 0
        for _, _, start, end in spans:
            if start != kept:
                out += [text[at:start], "\n" * text.count("\n", start, end)]
                at = end
        return "".join(out) + text[at:]

    texts = [keeping(start) for _, _, start, _ in spans]
    body = keeping(None)
    if any(not m.group("template") for m in KERNEL.finditer(body)):
        texts.append(body)
    return texts


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
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            name = os.path.basename(path)[:-len(".metal")]
            with open(path, encoding="utf-8") as f:
                text = f.read()
            whole = compile_seconds(clang, name, text, args.repeat, tmp)
            each = [compile_seconds(clang, name, t, args.repeat, tmp) for t in compile_texts(text, name)]
            rows.append((name, len(each), whole, statistics.median(each), max(each)))
    print("| library | compile texts | whole library, s | per kernel, median s | per kernel, max s |")
    print("| --- | --- | --- | --- | --- |")
    for name, texts, whole, median, largest in sorted(rows, key=lambda r: -r[2]):
        print(f"| {name} | {texts} | {whole:.2f} | {median:.2f} | {largest:.2f} |")


if __name__ == "__main__":
    main()
