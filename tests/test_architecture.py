"""docs/ARCHITECTURE.md against the code, where a statement can be checked.

Three fenced blocks of the document are machine-readable:

- `include-graph`: every folder-to-folder edge of the project's `#include`s,
  one `from -> to` a line, optionally `: a.h, b.h` when the edge reaches only
  those files of `to`. The picture must be exactly the graph the sources have
  (an edge drawn that no include makes fails, so does an include the picture
  lacks), and the picture itself has no cycle: an include that runs back up
  is an edge the picture cannot take.
- `tensorflow-headers`: the files that include TensorFlow's headers, by path
  pattern; `(C API)` after a pattern: those files include only
  `tensorflow/c/` headers. Every file that includes one is matched, and every
  pattern matches such a file.
- `tensorflow-free`: files that reach no TensorFlow header, directly or through
  the project's headers (so nvcc, the MSL compiler and the harness build them
  without TensorFlow).
- `shader-buffers`: `<shader>: <header> <Enum> ...` for every
  kernels/metal/<shader>.metal: each of its `[[buffer(...)]]` indices is an
  enumerator of those enums (spelled `mo::<name>`, never a number), and each
  enum named is used by the shader.
"""
import collections
import fnmatch
import glob
import os
import re

import pytest

from tests.test_include_layers import OPS, ROOT, cycles, folder_graph, leaf_folder, op_folder, project_includes

pytestmark = pytest.mark.source_tree("docs/ARCHITECTURE.md and the sources")

DOC = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
_TF_INCLUDE = re.compile(r'^[ \t]*#[ \t]*(?:include|import)[ \t]*[<"](tensorflow/[^>"]+)[>"]', re.M)


def doc_block(kind, text=None):
    """The lines of the ```<kind> block of ARCHITECTURE.md, comments (#) and blanks dropped."""
    if text is None:
        with open(DOC, encoding="utf-8") as f:
            text = f.read()
    m = re.search(r"^```" + re.escape(kind) + r"[ \t]*\n(.*?)^```", text, re.M | re.S)
    assert m, f"docs/ARCHITECTURE.md has no ```{kind} block"
    lines = [line.split("#", 1)[0].strip() for line in m.group(1).splitlines()]
    return [line for line in lines if line]


def parse_graph(lines):
    """{(from, to): set of file names of `to` or None (any)} from `a -> b[: f, g]` lines."""
    edges = {}
    for line in lines:
        m = re.fullmatch(r"(\S+)\s*->\s*(\S+?)(?:\s*:\s*(.+))?", line)
        assert m, f"not an edge (from -> to[: files]): {line!r}"
        a, b, files = m.groups()
        assert (a, b) not in edges, f"edge drawn twice: {a} -> {b}"
        edges[(a, b)] = {f.strip() for f in files.split(",")} if files else None
    return edges


def graph_problems(drawn, real):
    """What differs between the drawn edges and the real ones ({edge: ['file:line -> file', ...]})."""
    problems = []
    for edge, where in sorted(real.items()):
        if edge not in drawn:
            closes = cycles(list(drawn) + [edge])
            why = f" (runs back up: closes the cycle {' -> '.join(closes[0])})" if closes else ""
            problems.append(f"include not in the picture{why}: {edge[0]} -> {edge[1]}: " + "; ".join(where[:3]))
        elif drawn[edge] is not None:
            reached = {w.rsplit(" -> ", 1)[1].rsplit("/", 1)[1] for w in where}
            if reached != drawn[edge]:
                problems.append(f"{edge[0]} -> {edge[1]} reaches {sorted(reached)}, the picture says "
                                f"{sorted(drawn[edge])}")
    for edge in sorted(set(drawn) - set(real)):
        problems.append(f"drawn but no such include: {edge[0]} -> {edge[1]}")
    return problems


INCLUDES = project_includes()


def picture_graph(includes):
    """The folder graph as the picture draws it: every op folder is one node,
    kernels/<op>, except in an include from one op's folder into another's (a
    family), which names both."""
    edges = {}
    for src, line, dst in includes:
        a, b = leaf_folder(src), leaf_folder(dst)
        if not (op_folder(a) and op_folder(b)):
            a = "kernels/<op>" if op_folder(a) else a
            b = "kernels/<op>" if op_folder(b) else b
        if a != b:
            edges.setdefault((a, b), []).append(f"{src}:{line} -> {dst}")
    return edges


def test_the_include_picture_is_the_real_graph():
    drawn = parse_graph(doc_block("include-graph"))
    problems = graph_problems(drawn, picture_graph(INCLUDES))
    assert not problems, "docs/ARCHITECTURE.md's include-graph block and the sources' #includes differ:\n" + \
        "\n".join(problems)


def test_the_include_picture_runs_one_way():
    found = cycles(parse_graph(doc_block("include-graph")))
    assert not found, f"the picture has a cycle: {found}"


def test_a_back_include_fails_against_the_picture():
    """An include from kernels/spec up into kernels (a kernel class) is named as one that runs back up."""
    drawn = parse_graph(["kernels -> kernels/spec", "ops -> kernels/spec", "kernels/spec -> kernels/common"])
    real = {("kernels", "kernels/spec"): ["kernels/x_kernel.h:3 -> kernels/spec/x_spec.h"],
            ("ops", "kernels/spec"): ["ops/x_op.cc:4 -> kernels/spec/x_spec.h"],
            ("kernels/spec", "kernels/common"): ["kernels/spec/x_spec.h:5 -> kernels/common/x.h"],
            ("kernels/spec", "kernels"): ["kernels/spec/x_spec.h:6 -> kernels/x_kernel.h"]}
    problems = graph_problems(drawn, real)
    assert len(problems) == 1 and "runs back up" in problems[0] and "kernels/spec -> kernels" in problems[0]
    # A file list is a statement too, and an edge drawn that no include makes is caught.
    drawn = parse_graph(["ops -> kernels: tf_eigen.h", "ops -> kernels/spec"])
    problems = graph_problems(drawn, {("ops", "kernels"): ["ops/x_op.cc:3 -> kernels/x_kernel.h"]})
    assert problems == ["ops -> kernels reaches ['x_kernel.h'], the picture says ['tf_eigen.h']",
                        "drawn but no such include: ops -> kernels/spec"]


def _project_sources():
    for src in sorted({s for s, _, _ in INCLUDES} | {d for _, _, d in INCLUDES} | set(_all_sources())):
        yield src


def _all_sources():
    for top in ("ops", "kernels", "grappler", "runtime", "tests"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".h", ".cc", ".mm", ".metal")):
                    yield os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/")


def tensorflow_includes():
    """{file: [tensorflow/... headers it includes]} over the project's sources."""
    found = {}
    for src in _project_sources():
        with open(os.path.join(ROOT, src), encoding="utf-8", errors="replace") as f:
            headers = _TF_INCLUDE.findall(f.read())
        if headers:
            found[src] = headers
    return found


def test_the_files_that_include_tensorflow_are_the_ones_named():
    patterns = []
    for line in doc_block("tensorflow-headers"):
        c_api = line.endswith("(C API)")
        patterns.append((line.removesuffix("(C API)").strip(), c_api))
    tf = {f: h for f, h in tensorflow_includes().items() if not f.startswith("tests/")}
    assert len(tf) > 20, "the parse found too few TensorFlow includes to check anything"
    unnamed = sorted(f for f in tf if not any(fnmatch.fnmatchcase(f, p) for p, _ in patterns))
    assert not unnamed, f"include TensorFlow's headers but docs/ARCHITECTURE.md does not say so: {unnamed}"
    for pattern, c_api in patterns:
        matched = [f for f in tf if fnmatch.fnmatchcase(f, pattern)]
        assert matched, f"docs/ARCHITECTURE.md names {pattern} as including TensorFlow's headers: none does"
        if c_api:
            beyond = {f: [h for h in tf[f] if not h.startswith("tensorflow/c/")] for f in matched}
            assert not any(beyond.values()), f"{pattern} is said to use the C API only: {beyond}"


def test_the_tensorflow_free_files_reach_no_tensorflow_header():
    tf = tensorflow_includes()
    deps = collections.defaultdict(set)
    for src, _, dst in INCLUDES:
        deps[src].add(dst)
    sources = list(_project_sources())
    for pattern in doc_block("tensorflow-free"):
        # kernels/<op>/<op>.h: that file of every op that has one.
        expanded = [pattern.replace("<op>", op) for op in OPS] if "<op>" in pattern else [pattern]
        matched = [f for f in sources if any(fnmatch.fnmatchcase(f, p) for p in expanded)]
        assert matched, f"docs/ARCHITECTURE.md's tensorflow-free pattern {pattern} matches no file"
        for start in matched:
            seen, todo, path = {start}, [start], {start: [start]}
            while todo:
                f = todo.pop()
                assert f not in tf, f"{start} reaches TensorFlow's {tf[f][0]} through {' -> '.join(path[f])}"
                for g in deps[f] - seen:
                    seen.add(g)
                    path[g] = path[f] + [g]
                    todo.append(g)


_BUFFER_ATTR = re.compile(r"\[\[\s*buffer\(\s*([^\]]+?)\s*\)\s*\]\]")


def enum_members(header_text, name):
    """The enumerators of `enum <name> { ... }` in a header (None if there is no such enum)."""
    m = re.search(r"\benum\s+" + re.escape(name) + r"\s*\{([^{}]*)\}", header_text)
    if not m:
        return None
    items = (item.split("=")[0].strip() for item in re.sub(r"//[^\n]*", "", m.group(1)).split(","))
    return {item for item in items if item}


def shader_buffer_problems(lines, shaders):
    """What differs between the shader-buffers block and the shaders ({name: source text})."""
    problems, listed = [], {}
    for line in lines:
        m = re.fullmatch(r"(\w+):\s*(\S+)\s+(.+)", line)
        if not m:
            problems.append(f"not `shader: header Enum ...`: {line!r}")
            continue
        listed[m.group(1)] = (m.group(2), m.group(3).split())
    for name in sorted(set(shaders) - set(listed)):
        problems.append(f"{name}.metal is not in the block")
    for name, (header, enums) in sorted(listed.items()):
        if name not in shaders:
            problems.append(f"{name}: no kernels/*/{name}.metal")
            continue
        path = os.path.join(ROOT, header)
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        members = {}
        for enum in enums:
            found = enum_members(text, enum)
            if found is None:
                problems.append(f"{name}: {header} has no enum {enum}")
            else:
                members[enum] = found
        used = set()
        for index in _BUFFER_ATTR.findall(shaders[name]):
            enumerator = index[len("mo::"):] if index.startswith("mo::") else None
            owners = [e for e, m in members.items() if enumerator in m]
            if not owners:
                problems.append(f"{name}.metal: [[buffer({index})]] is not an enumerator of {', '.join(enums)}")
            used.update(owners)
        for enum in sorted(set(members) - used):
            problems.append(f"{name}: the block names {enum}, which the shader never uses")
    return problems


def _shader_sources():
    return {os.path.basename(p)[:-len(".metal")]: open(p, encoding="utf-8").read()
            for p in sorted(glob.glob(os.path.join(ROOT, "kernels", "*", "*.metal")))}


def test_every_shader_binds_its_buffers_by_the_enums_named():
    shaders = _shader_sources()
    assert len(shaders) >= 10
    problems = shader_buffer_problems(doc_block("shader-buffers"), shaders)
    assert not problems, "docs/ARCHITECTURE.md's shader-buffers block and the shaders differ:\n" + "\n".join(problems)


def test_a_literal_buffer_index_or_a_stale_row_is_reported():
    shaders = {"zero_out": "kernel void f(device int* a [[buffer(0)]], device int* b [[buffer(mo::kZeroOutOut)]])"}
    problems = shader_buffer_problems(["zero_out: kernels/zero_out/zero_out.h ZeroOutBuffers",
                                       "gone: kernels/zero_out/zero_out.h ZeroOutBuffers"], shaders)
    assert problems == ["gone: no kernels/*/gone.metal",
                        "zero_out.metal: [[buffer(0)]] is not an enumerator of ZeroOutBuffers"]
    problems = shader_buffer_problems(["zero_out: kernels/zero_out/zero_out.h NoSuchEnum"], {"zero_out": "", "x": ""})
    assert problems == ["x.metal is not in the block", "zero_out: kernels/zero_out/zero_out.h has no enum NoSuchEnum"]


@pytest.mark.parametrize("kind", ["include-graph", "tensorflow-headers", "tensorflow-free", "shader-buffers"])
def test_a_missing_block_is_reported(kind):
    with pytest.raises(AssertionError, match=kind):
        doc_block(kind, text="# Architecture\n")
