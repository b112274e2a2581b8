"""docs/ENVIRONMENT.md lists every METAL_OPS_* environment variable the code
reads, and lists no other: the sources (Python, C++, shell, make, Bazel) are
scanned for the names their code (not their comments) uses."""
import ast
import os
import re

import pytest

pytestmark = pytest.mark.source_tree("docs/ENVIRONMENT.md")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "ENVIRONMENT.md")
NAME = re.compile(r"\bMETAL_OPS_[A-Z0-9_]*[A-Z0-9]\b")
TOPS = ("python", "kernels", "runtime", "examples", "benchmarks", "tools", "tests", "grappler", "ops",
        "third_party", ".ci", ".github")
FILES = ("Makefile", "setup.py", "BUILD", "WORKSPACE")
C_FAMILY = (".h", ".cc", ".mm", ".metal", ".cu", ".c", ".cpp")
HASH_COMMENTED = (".sh", ".bzl", ".yml", ".yaml", ".bazel", ".toml", ".cfg", ".ini")


def python_code_names(text):
    """The names a Python module's code uses: its string constants (docstrings
    left out), keyword arguments and identifiers."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.add(id(body[0].value))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.update(NAME.findall(node.value))
        elif isinstance(node, ast.keyword) and node.arg:
            found.update(NAME.findall(node.arg))
        elif isinstance(node, ast.Name):
            found.update(NAME.findall(node.id))
    return found


def c_code_names(text):
    """The names a C-family file's code uses: comments and preprocessor lines
    (include guards) left out, string literals kept."""
    code = re.sub(r'//[^\n]*|/\*.*?\*/|("(?:\\.|[^"\\\n])*")', lambda m: m.group(1) or " ", text, flags=re.S)
    code = re.sub(r"^\s*#\s*(?:if|ifdef|ifndef|define|endif|undef|elif|else)\b[^\n]*", "", code, flags=re.M)
    return set(NAME.findall(code))


def hash_code_names(text):
    """The names a shell, make, Bazel or YAML file's code uses (# comments left out)."""
    code = re.sub(r"(?:^|(?<=\s))#[^\n]*", "", text)
    return set(NAME.findall(code))


def code_names(path, text):
    if path.endswith(".py"):
        return python_code_names(text)
    if path.endswith(C_FAMILY):
        return c_code_names(text)
    return hash_code_names(text)


def source_files():
    for name in FILES:
        if os.path.exists(os.path.join(ROOT, name)):
            yield os.path.join(ROOT, name)
    skip = {"build", "__pycache__", "results", "node_modules"}
    for top in TOPS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in skip and not d.startswith("venv")]
            for f in files:
                path = os.path.join(folder, f)
                shell = f in ("Makefile", "BUILD", "run") or (not os.path.splitext(f)[1] and _is_script(path))
                if f.endswith((".py",) + C_FAMILY + HASH_COMMENTED) or shell:
                    yield path


def _is_script(path):
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


SELF = os.path.abspath(__file__)


def read_by_code():
    """{name: [files whose code uses it]}."""
    found = {}
    for path in source_files():
        if os.path.abspath(path) == SELF:  # its own examples
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in code_names(path, text):
            found.setdefault(name, []).append(os.path.relpath(path, ROOT))
    return found


def documented():
    """The variables docs/ENVIRONMENT.md lists: the first cell of its tables' rows."""
    with open(DOC, encoding="utf-8") as f:
        return set(re.findall(r"^\| `(METAL_OPS_[A-Z0-9_]+)", f.read(), flags=re.M))


def test_scanner_reads_code_and_not_comments():
    py = ('"""METAL_OPS_DOCSTRING is documentation."""\nimport os\n# METAL_OPS_COMMENT\n'
          'a = os.environ.get("METAL_OPS_A")\nENV = "METAL_OPS_B"\nenv = dict(os.environ, METAL_OPS_C="1")\n')
    assert code_names("x.py", py) == {"METAL_OPS_A", "METAL_OPS_B", "METAL_OPS_C"}
    cc = ('#ifndef METAL_OPS_GUARD_H\n#define METAL_OPS_GUARD_H\n// METAL_OPS_COMMENT=1\n'
          '/* METAL_OPS_BLOCK */ const char* v = std::getenv("METAL_OPS_D");\n')
    assert code_names("x.h", cc) == {"METAL_OPS_D"}
    sh = 'METAL_OPS_E=1 python x.py  # METAL_OPS_COMMENT\necho "$METAL_OPS_F" ${METAL_OPS_G:-0}\n'
    assert code_names("x.sh", sh) == {"METAL_OPS_E", "METAL_OPS_F", "METAL_OPS_G"}


def test_doc_lists_every_variable_the_code_reads():
    read, listed = read_by_code(), documented()
    missing = {name: files for name, files in read.items() if name not in listed}
    assert not missing, "docs/ENVIRONMENT.md does not list: " + "; ".join(
        f"{name} (read in {', '.join(sorted(files)[:3])})" for name, files in sorted(missing.items()))


def test_doc_lists_only_variables_the_code_reads():
    stale = sorted(documented() - set(read_by_code()))
    assert not stale, f"docs/ENVIRONMENT.md lists variables no code reads: {stale}"
