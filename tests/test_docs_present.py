"""The docs speak of the software as it is: no commit hashes, issue numbers or
labels of periods of work ("session 21", "round 3", "run2") in docs/, the
READMEs or the names of the result files, and every file of the tree a doc
cites exists."""
import glob
import os
import re

import pytest

pytestmark = pytest.mark.source_tree("the docs")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = sorted([os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md"))
              + glob.glob(os.path.join(ROOT, "examples", "*", "README.md")))

# A git hash: 7-40 hex digits with a digit and a letter, standing alone or at
# the end of a file name (foo_77d904f.txt); not a 0x constant or a #colour.
HASH = re.compile(r"(?<![0-9A-Za-z#])(?<!0x)(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")
# A bare issue number (#32, "issue 16", "issue-16"); owner/repo#27 cites an
# external tracker and is allowed.
ISSUE = re.compile(r"(?<![\w/.-])#\d+\b|\b[Ii]ssues? ?[-#]?\d+\b")
# A period of work.
PERIOD = re.compile(r"\b[Ss]essions? \d+\b|\bthis session\b|\b[Rr]ound \d+ of the work\b|\b[Rr]ound \d+\b(?! of \d)"
                    r"|(?:\b|_)run ?\d+\b|_[A-Z]\.(?:json|txt)\b|_committed\b")


def prose(text):
    """The text without fenced code blocks (shell sessions, program output)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def violations(text):
    found = []
    for lineno, line in enumerate(prose(text).splitlines(), 1):
        for kind, pattern in (("commit hash", HASH), ("issue number", ISSUE), ("period of work", PERIOD)):
            found += [f"{lineno}: {kind} {m.group(0)!r}: {line.strip()[:120]}" for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_has_no_history(path):
    with open(path, encoding="utf-8") as f:
        found = violations(f.read())
    assert not found, f"{os.path.relpath(path, ROOT)} speaks of the work, not the software:\n" + "\n".join(found)


def test_result_file_names_have_no_history():
    names = os.listdir(os.path.join(ROOT, "benchmarks", "results"))
    found = [n for n in names if violations(n.replace("_", " ").replace(".", " "))]
    assert not found, f"benchmarks/results: names with a hash, issue or period of work: {found}"


# A path in the tree a doc cites: `benchmarks/results/x.json`, (../docs/X.md), ...
CITED = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:benchmarks|docs|examples|kernels|python|tests|tools|ops|grappler)"
                   r"/[\w./-]*\w)")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_cited_files_exist(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    base = os.path.dirname(path)
    missing = []
    for m in CITED.finditer(text):
        cited = m.group(1)
        # A pattern, not a file: `nerf_<scene>.<device>.json`, `ab_*.json`.
        pattern = any(c in text[m.start(1):m.end(1) + 2] for c in "*<>{}$")
        if pattern or cited.endswith("/..."):
            continue
        candidates = [os.path.join(base, cited), os.path.join(ROOT, cited.lstrip("./"))]
        if not any(os.path.exists(c) for c in candidates):
            missing.append(cited)
    results = [c for c in missing if "benchmarks/results/" in c]
    assert not results, f"{os.path.relpath(path, ROOT)} cites result files that do not exist: {sorted(set(results))}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_result_files_named_alone_exist(path):
    """A result file cited by its name alone (`nerf_demo.h100.json`)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    results = set(os.listdir(os.path.join(ROOT, "benchmarks", "results")))
    named = set(re.findall(r"\b([a-z0-9_]+\.(?:cpu|h100|h200)\.(?:json|png))\b", text))
    assert named <= results, f"{os.path.relpath(path, ROOT)} names result files that do not exist: {named - results}"
