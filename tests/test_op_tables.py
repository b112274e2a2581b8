"""The docs' op tables against the ops themselves: README's table of dtypes
names every op (its table of ops is tests/test_build.py's), and docs/XLA.md's
table names every op with XLA kernels and each of those kernels, found in
TensorFlow's kernel registry (metal_ops.selftest.xla_ops)."""
import os
import re
import sys

import pytest
from tensorflow.python.framework import kernels

from metal_ops import _loader, selftest
from tests import op_files

pytestmark = pytest.mark.source_tree("the docs' op tables and the op folders")

ROOT = op_files.ROOT


def table(path, header):
    """The rows (lists of cells) of the markdown table under the line that starts with `header`."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_readme_dtype_table_names_every_op():
    named = {name for row in table("README.md", "| op | dtypes |") for name in re.findall(r"`(\w+)`", row[0])}
    assert not set(op_files.OPS) - named, f"ops missing from README's table of dtypes: {set(op_files.OPS) - named}"


@pytest.mark.skipif(sys.platform == "darwin", reason="the macOS build has no XLA kernels")
def test_xla_table_names_every_op_with_xla_kernels_and_its_kernels():
    ops = selftest.xla_ops()
    assert ops, "no op has XLA kernels in this process"
    rows = table("docs/XLA.md", "| op (wrapper) | XLA kernels")
    wrappers = {re.search(r"\(`(\w+)`", row[0]).group(1) for row in rows}
    assert wrappers == set(ops), f"docs/XLA.md's table against the ops with XLA kernels: {wrappers ^ set(ops)}"
    listed = {name for row in rows for name in re.findall(r"\b(?:MetalOps\w+|ZeroOut)\b", row[1])}
    library = _loader.load_library()
    # The library's ops: its generated wrappers, MetalOps<Name> beside metal_ops_<name>.
    snake = {name.replace("_", "") for name in dir(library) if name.islower() and not name.startswith("_")}
    registered = {name for name in dir(library) if name[:1].isupper() and name.lower() in snake
                  and any(k.device_type == "XLA_CPU_JIT" for k in kernels.get_registered_kernels_for_op(name).kernel)}
    assert listed == registered, f"docs/XLA.md's kernels against TensorFlow's registry: {listed ^ registered}"
