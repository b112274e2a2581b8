"""The MSL rules check (tools/check/msl_check.py) on the shader sources the library
embeds, one case per (library, rule), and on planted violations of each rule
(tests/msl_check/violations/<rule>.metal), so it can never pass by checking
nothing. Needs the source tree and clang 14+ (`make test` installs Debian's
clang when it can); skips with the reason otherwise.
"""
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests", "msl_check")
SOURCES = sorted(glob.glob(os.path.join(ROOT, "kernels", "*", "*.metal")))

if not os.path.isfile(os.path.join(ROOT, "tools", "check", "msl_check.py")) or not SOURCES:
    pytest.skip("the MSL rules check needs the source tree (tools/, kernels/): not in an installed package",
                allow_module_level=True)

from tools.build import embed_metal  # noqa: E402
from tools.check import msl_check  # noqa: E402

CLANG = msl_check.find_clang()
pytestmark = pytest.mark.skipif(CLANG is None, reason=f"MSL rules check skipped: {msl_check.why_no_clang()}")

LIBRARIES = [os.path.splitext(os.path.basename(s))[0] for s in SOURCES]
RULES = list(msl_check.RULES)

# (library, rule) pairs a shader is known to break, each with the issue that
# tracks it: expected failures, strict, so a fix shows up as XPASS and the
# mark must go. Empty: every shader follows every rule.
KNOWN = {}


def _format(violations):
    return "\n".join(f"{v.path}:{v.line}: [{v.rule}] {v.message}" for v in violations)


@pytest.fixture(scope="module")
def embedded_reports(tmp_path_factory):
    """Reports of the sources as the library embeds them (embed_metal's expansion)."""
    out = str(tmp_path_factory.mktemp("gen"))
    embed_metal.embed(SOURCES, ROOT, out)
    paths = [os.path.join(out, name + ".metal") for name in LIBRARIES]
    return dict(zip(LIBRARIES, msl_check.check_files(paths, clang=CLANG)))


def _case(library, rule):
    reason = KNOWN.get((library, rule))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(library, rule, marks=marks, id=f"{library}-{rule}")


@pytest.mark.parametrize("library,rule", [_case(lib, rule) for lib in LIBRARIES for rule in RULES])
def test_embedded_shader_follows_rule(embedded_reports, library, rule):
    report = embedded_reports[library]
    found = [v for v in report.violations if v.rule == rule]
    assert not found, f"{library}.metal breaks [{rule}] {msl_check.RULES[rule]}:\n{_format(found)}"


@pytest.mark.parametrize("library", LIBRARIES)
def test_embedded_shader_was_checked(embedded_reports, library):
    # The compile produced every kernel and the lint read the shader's lines.
    report = embedded_reports[library]
    assert report.kernels > 0 and report.lines > 0, (report.kernels, report.lines, report.compiler_output)


def test_every_rule_has_a_planted_violation():
    planted = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(HERE, "violations", "*.metal"))}
    assert planted == set(RULES)


@pytest.fixture(scope="module")
def planted_reports():
    paths = [os.path.join(HERE, "clean.metal")] + [os.path.join(HERE, "violations", r + ".metal") for r in RULES]
    reports = msl_check.check_files(paths, clang=CLANG)
    return reports[0], dict(zip(RULES, reports[1:]))


def test_clean_shader_passes(planted_reports):
    clean, _ = planted_reports
    assert clean.ok(), _format(clean.violations)
    assert clean.kernels == 1 and clean.lines > 10


@pytest.mark.parametrize("rule", RULES)
def test_planted_violation_fails(planted_reports, rule):
    report = planted_reports[1][rule]
    assert not report.ok()
    assert rule in report.rules(), f"{rule} not reported; got:\n{_format(report.violations)}"
    planted = next(v for v in report.violations if v.rule == rule)
    assert planted.path.endswith(os.path.join("violations", rule + ".metal")) and planted.line > 0


@pytest.mark.parametrize("parameter", ["thread float* v", "float* v", "thread float& v"])
def test_device_pointer_passed_as_thread_pointer_fails(tmp_path, parameter):
    deref = "v" if "&" in parameter else "*v"
    arg = "y[gid]" if "&" in parameter else "y + gid"
    path = tmp_path / "k.metal"
    path.write_text(f"#include <metal_stdlib>\ninline void twice({parameter}) {{ {deref} *= 2.0f; }}\n"
                    "kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {\n"
                    f"  twice({arg});\n}}\n")
    report = msl_check.check_file(str(path), CLANG, root=str(tmp_path))
    assert report.rules() == {"address-space"}, _format(report.violations)
    assert report.violations[0].line == 4


METHOD_SHADER = """#include <metal_stdlib>
struct Counter {
  int n;
  void bump() { n += 1; }
};
inline void set(thread int& v) { v = 1; }
struct Cursor {
  int level;
  void start() { set(level); }
};
kernel void k(device Counter* c [[buffer(0)]], constant Counter& q [[buffer(1)]],
              uint gid [[thread_position_in_grid]]) {
  Cursor cursor;
  cursor.start();
  Counter local = c[0];  // struct copies from and to device memory
  local.bump();
  c[1] = local;
  %s
}
"""


@pytest.mark.parametrize("line,rule", [
    ("c[gid].n = 0;", None),  # a thread object's members through `this`: MSL's default space
    ("c[gid].bump();", "address-space"),  # a method without `device` on a device object
    ("q.bump();", "address-space"),  # ... on a constant one
    ("set(c[gid].n);", "address-space"),  # a device int as a thread reference
])
def test_methods_and_references_follow_msl_address_spaces(tmp_path, line, rule):
    path = tmp_path / "k.metal"
    path.write_text(METHOD_SHADER % line)
    report = msl_check.check_file(str(path), CLANG, root=str(tmp_path))
    assert report.rules() == ({rule} if rule else set()), _format(report.violations)
    assert all(v.line == 18 for v in report.violations)


def test_cli_exit_status(capsys):
    assert msl_check.main([os.path.join(HERE, "clean.metal")]) == 0
    assert msl_check.main([os.path.join(HERE, "violations", "long-long.metal")]) == 1
    out = capsys.readouterr().out
    assert "long-long.metal:4: [long-long]" in out and "`0xffffffffull`" in out


def _tree(tmp_path, header, shader_body):
    (tmp_path / "kernels" / "common").mkdir(parents=True)
    (tmp_path / "kernels" / "metal").mkdir(parents=True)
    (tmp_path / "kernels" / "common" / "helper.h").write_text(header)
    (tmp_path / "kernels" / "metal" / "lib.metal").write_text(
        '#include <metal_stdlib>\n#include "kernels/common/helper.h"\n' + shader_body)
    embed_metal.embed([str(tmp_path / "kernels" / "metal" / "lib.metal")], str(tmp_path), str(tmp_path / "gen"))
    return str(tmp_path / "gen" / "lib.metal")


def test_violation_is_reported_at_the_original_header_line(tmp_path):
    path = _tree(tmp_path, "// helper\n#pragma once\ninline ulong low(ulong v) { return v & 0xffull; }\n",
                 "kernel void k(device ulong* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {\n"
                 "  y[gid] = low(y[gid]) % 3ull;\n}\n")
    report = msl_check.check_file(path, CLANG, root=str(tmp_path))
    where = sorted((v.path, v.line) for v in report.violations if v.rule == "long-long")
    assert where == [(os.path.join("kernels", "common", "helper.h"), 3),
                     (os.path.join("kernels", "metal", "lib.metal"), 4)]


@pytest.mark.parametrize("comment,waived",
                         [("", False), ("  // msl_check: allow int64-division: once per thread", True)])
def test_int64_division_can_be_waived_on_its_line(tmp_path, comment, waived):
    path = _tree(tmp_path, "#pragma once\n",
                 "kernel void k(device long* y [[buffer(0)]], constant long& n [[buffer(1)]],\n"
                 "              uint gid [[thread_position_in_grid]]) {\n"
                 f"  const long rows = y[0] / n;{comment}\n  y[gid] = rows;\n}}\n")
    report = msl_check.check_file(path, CLANG, root=str(tmp_path))
    assert report.ok() == waived, _format(report.violations)
    assert len(report.waived) == (1 if waived else 0)


TEMPLATE_SHADER = """#include <metal_stdlib>
enum Buffers { kIn, kOut, kCount = kIn };
template <typename T, int N>
[[kernel]] void scale(device const T* x [[buffer(kIn)]], device T* y [[buffer(%s)]],
                      uint gid [[thread_position_in_grid]]) {
  y[gid] = x[gid] * T(N);
}
template [[host_name("scale_float_2")]] [[kernel]] decltype(scale<float, 2>) scale<float, 2>;
template [[host_name("scale_half_3")]] [[kernel]] decltype(scale<half, 3>) scale<half, 3>;
"""


@pytest.mark.parametrize("out_index,rule", [
    ("kOut", None),
    ("1", None),
    ("kCount", "buffer-index"),  # an enumerator equal to kIn: bound twice
    ("kNoSuchIndex", "buffer-index"),
])
def test_kernel_templates_are_checked_as_kernels(tmp_path, out_index, rule):
    path = tmp_path / "t.metal"
    path.write_text(TEMPLATE_SHADER % out_index)
    report = msl_check.check_file(str(path), CLANG, root=str(tmp_path))
    assert report.kernels == 2, report.compiler_output
    assert report.rules() == ({rule} if rule else set()), _format(report.violations)
