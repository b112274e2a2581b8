"""The project's folders depend one way, and an op's <op>_op.cc holds only its op definitions.

Every `#include "..."` (and Objective-C `#import "..."`) of the project's C,
C++, Objective-C++, CUDA and Metal sources that names a project file (from the
repository root, the build's -I., or beside the including file) is an edge
between two folders. The folders form layers when that graph has no cycle,
both between leaf folders (kernels/<op>, kernels/spec, kernels/cpu, ...)
and between top-level folders (kernels, grappler, tests, ...): a folder
never includes from a folder that includes it back, directly or through others.

kernels/ holds one folder per op (kernels/<op>/, holding kernels/<op>/<op>_op.cc)
and the shared folders. An op folder includes the shared folders and, where the op
builds on another, that op's folder (its family, drawn in
docs/ARCHITECTURE.md); a shared folder never includes an op folder.

kernels/<op>/<op>_op.cc holds the op's REGISTER_OPs and nothing else: its
attributes, parameters and checks live in its header, kernels/<op>/<op>.h,
which the op definition and every kernel of the op include.
"""
import collections
import os
import re

import pytest

pytestmark = pytest.mark.source_tree("the sources' includes")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSIONS = (".h", ".cc", ".cpp", ".cu", ".cuh", ".mm", ".m", ".metal")
# Not the project's sources: build outputs, Bazel's trees, vendored build rules.
SKIP_DIRS = {".git", "build", "third_party", "node_modules"}
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*(?:include|import)[ \t]*"([^"]+)"', re.M)


def _sources(root):
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith((".", "bazel-")))
        for name in sorted(files):
            if name.endswith(EXTENSIONS):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def project_includes(root=ROOT):
    """(including file, line, included file) for every include of a project file."""
    found = []
    for src in _sources(root):
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in _INCLUDE.finditer(text):
            name = m.group(1)
            for candidate in (name, os.path.join(os.path.dirname(src), name)):
                path = os.path.normpath(candidate)
                if os.path.isfile(os.path.join(root, path)):
                    found.append((src, text.count("\n", 0, m.start()) + 1, path.replace(os.sep, "/")))
                    break
    return found


def leaf_folder(path):
    return os.path.dirname(path) or "."


def top_folder(path):
    return path.split("/", 1)[0] if "/" in path else "."


def folder_graph(includes, folder_of):
    """{(from folder, to folder): [file:line -> file, ...]}, edges between distinct folders."""
    edges = collections.defaultdict(list)
    for src, line, dst in includes:
        a, b = folder_of(src), folder_of(dst)
        if a != b:
            edges[(a, b)].append(f"{src}:{line} -> {dst}")
    return dict(edges)


def cycles(edges):
    """The folders of every cycle of the graph (the folders that reach each
    other through includes, two or more), each sorted; [] when the folders
    form layers."""
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    reach = {}
    for start in list(graph):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        reach[start] = seen
    found = set()
    for a in reach:
        if a in reach[a]:  # a reaches itself: it is on a cycle, with every folder it reaches that reaches it back
            found.add(tuple(sorted(b for b in reach[a] if a in reach.get(b, ()))))
    return sorted(list(c) for c in found)


def back_includes(edges):
    """The includes that close a cycle, for the message: every edge between
    two folders of one cycle."""
    report = []
    for component in cycles(edges):
        members = set(component)
        for (a, b), where in sorted(edges.items()):
            if a in members and b in members:
                report.append(f"{a} -> {b}: " + "; ".join(where[:3]) + (" ..." if len(where) > 3 else ""))
    return report


INCLUDES = project_includes()
from tests.op_files import OPS  # noqa: E402


def op_folder(folder):
    """The op whose folder this is (kernels/<op>), else None."""
    parts = folder.split("/")
    return parts[1] if len(parts) == 2 and parts[0] == "kernels" and parts[1] in OPS else None


def test_includes_are_found():
    """The parse sees the layers it guards (a parse that found nothing would pass)."""
    leaf = folder_graph(INCLUDES, leaf_folder)
    for edge in [("kernels/sh_encode", "kernels/cpu"),
                 ("kernels/sh_encode", "kernels/spec"), ("kernels/cpu", "kernels/metal_plan"),
                 ("kernels/metal", "kernels/spec"), ("kernels/xla", "kernels/common")]:
        assert edge in leaf, f"no include from {edge[0]}/ into {edge[1]}/ found"
    assert ("grappler", "kernels") in folder_graph(INCLUDES, top_folder)


@pytest.mark.parametrize("granularity,folder_of", [("leaf folders", leaf_folder), ("top-level folders", top_folder)])
def test_folders_include_one_way(granularity, folder_of):
    found = back_includes(folder_graph(INCLUDES, folder_of))
    assert not found, f"{granularity} include each other (a cycle): move the shared part below both\n" + \
        "\n".join(found)


def test_shared_folders_never_include_an_op_folder():
    """What several ops share sits below every op: kernels/common, cpu, cuda,
    metal, metal_plan, spec, xla and framework include no kernels/<op>/ file."""
    found = [f"{src}:{line} -> {dst}" for src, line, dst in INCLUDES
             if src.startswith("kernels/") and not op_folder(leaf_folder(src)) and op_folder(leaf_folder(dst))]
    assert not found, "a shared folder includes an op's file (move the shared part below):\n" + "\n".join(found)


def test_cycle_detection():
    """The check fails on a back-include, between two folders and through a third."""
    assert cycles({("a", "b"): [], ("b", "c"): []}) == []
    assert cycles({("a", "b"): [], ("b", "a"): [], ("c", "a"): []}) == [["a", "b"]]
    assert cycles({("a", "b"): [], ("b", "c"): [], ("c", "a"): []}) == [["a", "b", "c"]]
    assert cycles({("a", "b"): [], ("b", "a"): [], ("a", "c"): [], ("c", "d"): [], ("d", "c"): []}) == \
        [["a", "b"], ["c", "d"]]


def test_a_back_include_is_caught(tmp_path):
    """A kernel header that includes an op definition closes a cycle at both granularities."""
    files = {
        "ops/x_op.cc": '#include "kernels/spec/x_spec.h"\nREGISTER_OP("X");\n',
        "kernels/spec/x_spec.h": "",
        "kernels/x_kernel.h": '#include "kernels/spec/x_spec.h"\n#include "ops/x_op.cc"\n',
        "ops/y_op.cc": '#include "kernels/x_kernel.h"\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    includes = project_includes(str(tmp_path))
    assert ("kernels/x_kernel.h", 2, "ops/x_op.cc") in includes
    assert cycles(folder_graph(includes, leaf_folder)) == [["kernels", "ops"]]
    assert cycles(folder_graph(includes, top_folder)) == [["kernels", "ops"]]


def test_op_shape_definitions_hold_only_op_definitions():
    """An op-shaped folder's <op>_op.cc (docs/ADDING_AN_OP.md) holds its
    REGISTER_OPs: checks, attributes and shared shape code belong in <op>.h and kernels/spec/."""
    from tests.op_files import OPS, op_definition

    assert {"trunc_exp", "sh_encode", "scene_contract"} <= set(OPS)
    for op in OPS:
        with open(os.path.join(ROOT, op_definition(op)), encoding="utf-8") as f:
            text = f.read()
        assert "REGISTER_OP(" in text and "REGISTER_KERNEL_BUILDER" not in text, op_definition(op)
