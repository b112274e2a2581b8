#!/usr/bin/env python3
"""Scaffolds a new op in the op shape (docs/ADDING_AN_OP.md) from a model op.

    tools/new_op.py NAME [--like trunc_exp | sh_encode] [--root DIR]

writes every file of the model op under NAME, from the model's files as they
stand in the tree (the templates are the model's own sources: the scaffold
cannot drift from them): kernels/NAME/ (the declaration and formulas, the
REGISTER_OP file, the CPU, CUDA, Metal and XLA files), the Python wrapper and
its gradient and self-test cases, the NumPy reference, the tests (values,
gradients, XLA, fuzzing, the MSL shim, the CUDA harness, NEON), the
benchmark and docs/NAME.md; and it adds the op's lines to
python/metal_ops/__init__.py, README.md's tables, docs/XLA.md's table and
docs/ARCHITECTURE.md's shader-buffers block. The new op computes its model's
formula (TruncExp: y = exp(x), no attribute but T; SHEncode: spherical
harmonics of directions, one Int attribute), builds and passes its tests as
it is; then its formulas, checks, reference and docs are edited into the new
op's own.

Names: NAME is snake_case (`soft_clip`); the op is MetalOps<Name>
(`MetalOpsSoftClip`), the header's macros MO_<NAME>_... Identifiers that
contain the model's name but belong to shared code (TruncExp's `kActTruncExp`
of kernels/common/activations.h) keep it.
"""
import argparse
import keyword
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("trunc_exp", "sh_encode")

# The folders beside kernels/<op>/ that hold an op's files, each file named
# after the op (tests/op_files.py finds them so), with an optional prefix
# (test_, test_fuzz_, bench_, sanitize_).
SIDE_FOLDERS = ("python/metal_ops", "python/metal_ops/_reference", "tests", "tests/reference", "tests/cuda",
                "tests/metal_shim", "tests/neon", "tests/fuzz", "benchmarks", "benchmarks/cuda")
# Shared code whose identifiers keep their names (they are not the op's).
SHARED_CODE = ("kernels/common", "kernels/cpu", "kernels/cuda", "kernels/framework", "kernels/metal",
               "kernels/metal_plan", "kernels/spec", "kernels/xla", "tests/metal_shim/shim.py",
               "tests/xla_checks.py", "tests/op_checks.py", "python/metal_ops/_args.py",
               "python/metal_ops/selftest.py")


class Names:
    """An op's names: snake (`trunc_exp`), Camel (`TruncExp`), UPPER (`TRUNC_EXP`)."""

    def __init__(self, snake, camel):
        self.snake, self.camel, self.upper = snake, camel, snake.upper()

    def forms(self):
        return (self.camel, self.upper, self.snake)


def camel_of(snake):
    return "".join(part.capitalize() for part in snake.split("_"))


def model_names(root, model):
    """The model's names, its CamelCase one from its REGISTER_OP (SHEncode is not sh_encode's title case)."""
    with open(os.path.join(root, "kernels", model, f"{model}_op.cc"), encoding="utf-8") as f:
        camel = re.search(r'REGISTER_OP\("MetalOps(\w+?)"\)', f.read()).group(1)
    return Names(model, camel)


def model_files(root, model):
    """The model's files (paths relative to root): its folder and the files
    named after it in SIDE_FOLDERS, and docs/<MODEL>.md."""
    files = [f"kernels/{model}/{f}" for f in sorted(os.listdir(os.path.join(root, "kernels", model)))]
    named = re.compile(rf"^(?:test_fuzz_|test_|bench_|sanitize_)?{re.escape(model)}(?:[._])")
    for folder in SIDE_FOLDERS:
        path = os.path.join(root, folder)
        files += [f"{folder}/{f}" for f in sorted(os.listdir(path))
                  if named.match(f) and os.path.isfile(os.path.join(path, f))]
    files.append(f"docs/{model.upper()}.md")
    return files


def shared_identifiers(root):
    """Every identifier of the shared code (SHARED_CODE), its comments left out."""
    words = set()
    for entry in SHARED_CODE:
        path = os.path.join(root, entry)
        paths = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
        for p in paths:
            with open(p, encoding="utf-8", errors="replace") as f:
                words.update(re.findall(r"\w+", strip_comments(p, f.read())))
    return words


def strip_comments(path, text):
    """The code of a C++ or Python file without its comments (and docstrings)."""
    if path.endswith(".py"):
        return re.sub(r"#[^\n]*", "", re.sub(r'"""[\s\S]*?"""', "", text))
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*[\s\S]*?\*/", "", text))


class Renamer:
    """Rewrites text of the model into text of the new op: each identifier
    (and file name) holding one of the model's names takes the new op's, but
    for those of the shared code that are not the model's own names."""

    def __init__(self, old, new, shared):
        self.old, self.new = old, new
        self.keep = {w for w in shared if any(form in w for form in old.forms())} - set(old.forms())
        # Whole parts of an identifier: the snake and UPPER forms between
        # underscores (or its ends), the CamelCase one before an upper-case
        # letter, a digit, an underscore or the end (hash_encode holds no sh_encode).
        camel, upper, snake = (re.escape(f) for f in old.forms())
        self.pattern = re.compile(rf"{camel}(?![a-z])|(?<![A-Za-z0-9]){upper}(?![A-Za-z0-9])|"
                                  rf"(?<![A-Za-z0-9]){snake}(?![a-z0-9])")
        self.swap = dict(zip(old.forms(), new.forms()))

    def word(self, match):
        w = match.group(0)
        return w if w in self.keep else self.pattern.sub(lambda m: self.swap[m.group(0)], w)

    def __call__(self, text):
        return re.sub(r"\w+", self.word, text)


def check_name(root, name):
    if not re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*", name) or keyword.iskeyword(name):
        raise SystemExit(f"new_op.py: NAME must be a snake_case identifier such as soft_clip, got {name!r}")
    taken = [p for p in (f"kernels/{name}", f"python/metal_ops/{name}.py",
                         f"docs/{name.upper()}.md") if os.path.exists(os.path.join(root, p))]
    if taken:
        raise SystemExit(f"new_op.py: the op {name!r} exists already ({', '.join(taken)})")


def edit(root, path, change):
    """Rewrites root/path through change(lines) -> lines; fails when nothing changes."""
    full = os.path.join(root, path)
    with open(full, encoding="utf-8") as f:
        lines = f.read().split("\n")
    new = change(lines)
    if new == lines:
        raise SystemExit(f"new_op.py: found no line of the model in {path} to add the op beside")
    with open(full, "w", encoding="utf-8") as f:
        f.write("\n".join(new))


def add_after(pred, rename):
    """A change that writes, after each line for which pred(line), that line renamed."""
    def change(lines):
        out = []
        for line in lines:
            out.append(line)
            if pred(line):
                out.append(rename(line))
        return out
    return change


def shared_edits(root, old, new, rename):
    """The op's lines in the shared files: the package's exports, README's ops
    and dtypes tables, docs/XLA.md's table, ARCHITECTURE.md's shader-buffers
    block; each beside the model's."""
    m, n = old.snake, new.snake
    edit(root, "python/metal_ops/__init__.py",
         add_after(lambda line: line.lstrip().startswith(f"from metal_ops.{m} import ") or line == f'    "{m}",',
                   rename))

    def readme(lines):
        lines = add_after(lambda line: line.startswith("|") and f"(docs/{old.upper}.md)" in line, rename)(lines)
        start = next(i for i, line in enumerate(lines) if line.startswith("| op | dtypes |"))
        for i in range(start, len(lines)):
            if not lines[i].startswith("|"):
                break
            cells = lines[i].split("|")
            if f"`{m}`" in cells[1]:
                cells[1] = cells[1].rstrip() + f", `{n}` "
                lines[i] = "|".join(cells)
        return lines

    edit(root, "README.md", readme)
    if os.path.isfile(os.path.join(root, "kernels", m, f"{m}_xla.cc")):
        edit(root, "docs/XLA.md", add_after(lambda line: line.startswith(f"| {old.camel} (`{m}`"), rename))
    if os.path.isfile(os.path.join(root, "kernels", m, f"{m}.metal")):
        edit(root, "docs/ARCHITECTURE.md", add_after(lambda line: line.startswith(f"{m}: kernels/{m}/"), rename))


def scaffold(root, name, like):
    check_name(root, name)
    old, new = model_names(root, like), Names(name, camel_of(name))
    rename = Renamer(old, new, shared_identifiers(root))
    written = []
    for path in model_files(root, like):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        target = rename(path)
        os.makedirs(os.path.dirname(os.path.join(root, target)), exist_ok=True)
        with open(os.path.join(root, target), "w", encoding="utf-8") as f:
            f.write(rename(text))
        os.chmod(os.path.join(root, target), os.stat(os.path.join(root, path)).st_mode)
        written.append(target)
    shared_edits(root, old, new, rename)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", metavar="NAME", help="the op's snake_case name (MetalOps<Name>, metal_ops.<name>)")
    parser.add_argument("--like", choices=MODELS, default="trunc_exp",
                        help="the model op: trunc_exp (no attribute but T; the default) or sh_encode "
                             "(one Int attribute)")
    parser.add_argument("--root", default=ROOT, help="the source tree to write into (default: this one)")
    args = parser.parse_args(argv)
    written = scaffold(os.path.abspath(args.root), args.name, args.like)
    print("\n".join(written))
    print("edited: python/metal_ops/__init__.py, README.md, docs/XLA.md, docs/ARCHITECTURE.md "
          "(the op's lines beside its model's)")
    print("next: `make all metal-shim`, then .venv/bin/python -m pytest "
          + " ".join(p for p in written if re.match(r"tests/test_\w+\.py$", p)) + " -q")
    return 0


if __name__ == "__main__":
    sys.exit(main())
