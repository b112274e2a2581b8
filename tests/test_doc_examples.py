"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one file run in order in one namespace (a later block may use
an earlier one's names, as a reader would), every file in one child process
(blocks may change the process: the fusion plugin). A block runs unless the
line before its fence marks it:

    <!-- doc-example: needs GPU -->    runs only where TensorFlow lists a GPU
    <!-- doc-example: needs data -->   not run here (it reads files the tree does not hold)
"""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from tests.child_env import child_env

pytestmark = pytest.mark.source_tree("README.md and docs/")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
MARKER = re.compile(r"<!-- doc-example: (.*?) -->")
NEEDS = ("needs GPU", "needs data")


def blocks(path):
    """[(line of the fence, marker or None, code)] of the file's python blocks."""
    lines = open(path, encoding="utf-8").read().splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            marker = MARKER.fullmatch(lines[i - 1].strip()) if i else None
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append((i + 1, marker.group(1) if marker else None, "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return found


BLOCKS = [(os.path.relpath(path, ROOT), line, marker, code) for path in DOCS for line, marker, code in blocks(path)]

CHILD = r"""
import json, sys, traceback
import tensorflow as tf
gpu = bool(tf.config.list_logical_devices("GPU"))
results, namespaces = {}, {}
for name, line, marker, code in json.load(sys.stdin):
    key = f"{name}:{line}"
    if marker == "needs data" or (marker == "needs GPU" and not gpu):
        results[key] = "skipped: " + marker
        continue
    names = namespaces.setdefault(name, {"__name__": "__doc_example__"})
    try:
        exec(compile(code, key, "exec"), names)
        results[key] = "ok"
    except BaseException:
        results[key] = traceback.format_exc(limit=4)
print("DOC-EXAMPLES " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def results():
    r = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(BLOCKS), capture_output=True, text=True,
                       cwd=ROOT, env=child_env(TF_CPP_MIN_LOG_LEVEL="2"), timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("DOC-EXAMPLES ")), None)
    assert line, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(line[len("DOC-EXAMPLES "):])


def test_blocks_are_found_and_markers_known():
    names = {name for name, *_ in BLOCKS}
    assert "README.md" in names and len(BLOCKS) >= 17, BLOCKS
    for op_doc in ("FUSED_MLP", "HASH_ENCODE", "VOLUME_RENDER", "RAY_MARCH", "ROBUST_LOSS", "DISTORTION_LOSS"):
        assert f"docs/{op_doc}.md" in names, f"docs/{op_doc}.md has no python example"
    unknown = [(name, line, marker) for name, line, marker, _ in BLOCKS if marker not in (None,) + NEEDS]
    assert not unknown, unknown


@pytest.mark.parametrize("name, line, marker, code", BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_block_runs_as_written(results, name, line, marker, code):
    outcome = results[f"{name}:{line}"]
    if outcome.startswith("skipped: "):
        pytest.skip(outcome)
    assert outcome == "ok", f"{name}:{line}:\n{code}\n{outcome}"
