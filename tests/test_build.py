"""The build descriptions agree with each other (fast: parsing, globbing, `make -n`).

- Bazel's BUILD globs and the Makefile's wildcards list the same sources, so
  `make bazel` builds the same op library as `make` as ops are added.
- The pip hook (setup.py) drives the Makefile without touching .venv and puts
  its outputs in the wheel's tree, and pins the TensorFlow it builds against.
- tools/check/check_op_library.py (run by `make bazel`) finds the declared ops.

The full `pip install .` (a complete compile, several minutes) is not run here;
docs/BUILDING.md says how it was checked.
"""
import ast
import glob
import importlib.util
import os
import platform
import re
import subprocess
import sys

import pytest

from tests.op_files import OPS, folder, named, op_definition

pytestmark = pytest.mark.source_tree("the build files (Makefile, Bazel, setup.py)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def _bazel_list(name):
    """A top-level `NAME = [ "...", ... ]` list literal in BUILD."""
    m = re.search(rf"^{name} = (\[.*?\])", _read("BUILD"), re.S | re.M)
    assert m, f"BUILD has no top-level list {name}"
    return ast.literal_eval(m.group(1))


def _expand(patterns, exclude=()):
    found = {os.path.relpath(p, ROOT) for pat in patterns for p in glob.glob(os.path.join(ROOT, pat))}
    dropped = {os.path.relpath(p, ROOT) for pat in exclude for p in glob.glob(os.path.join(ROOT, pat))}
    return sorted(found - dropped)


def _op_metal_srcs():
    """BUILD's OP_METAL_SRCS: the <op>_metal.cc of each folder with an <op>_op.cc."""
    return sorted(f for f in _expand(["kernels/*/*_metal.cc"]) if f[: -len("_metal.cc")] + "_op.cc" in
                  _expand(["kernels/*/*_op.cc"]))


def _bazel_files(name):
    """The files a BUILD target takes from a list's globs: less its NAME_EXCLUDE
    list where BUILD has one; the op library with OP_METAL_SRCS, the Metal
    glue without them."""
    if name == "OP_LIBRARY_SRCS":
        return sorted(_expand(_bazel_list(name), _bazel_list("OP_LIBRARY_EXCLUDE")) + _op_metal_srcs())
    if name == "METAL_CC_SRCS":
        return sorted(set(_expand(_bazel_list(name))) - set(_op_metal_srcs()))
    return _expand(_bazel_list(name))


@pytest.fixture(scope="module")
def make_vars(tmp_path_factory):
    return make_database(tmp_path_factory.mktemp("make"))


@pytest.mark.parametrize(
    "bazel_list,make_files",
    [
        # Bazel's op library leaves the XLA kernels out.
        ("OP_LIBRARY_SRCS", lambda v: sorted(set(v["CC_SRCS"].split()) - set(v["XLA_SRCS"].split()))),
        ("METAL_MM_SRCS", lambda v: sorted(v["MM_SRCS"].split())),
        ("METAL_CC_SRCS", lambda v: sorted(v["METAL_CC_SRCS"].split())),
        ("METAL_SHADER_SRCS", lambda v: sorted(v["METAL_SRCS"].split())),
        ("GRAPPLER_SRCS", lambda v: sorted(p[len(v["BUILD"]) + len("/obj/"):-2] + ".cc"
                                            for p in v["PLUGIN_OBJS"].split())),
    ],
)
def test_bazel_globs_and_makefile_wildcards_list_the_same_files(bazel_list, make_files, make_vars):
    bazel_files = _bazel_files(bazel_list)
    assert bazel_files == make_files(make_vars)
    assert bazel_files, f"{bazel_list} matches no file"


def test_op_library_sources_include_zero_out():
    files = _bazel_files("OP_LIBRARY_SRCS")
    assert op_definition("zero_out") in files and "kernels/zero_out/zero_out_cpu.cc" in files


def test_bazel_targets_use_the_glob_lists():
    build = _read("BUILD")
    assert "srcs = glob(OP_LIBRARY_SRCS, exclude = OP_LIBRARY_EXCLUDE) + OP_METAL_SRCS" in build
    assert "glob(METAL_CC_SRCS, allow_empty = True, exclude = OP_METAL_SRCS)" in build
    assert 'if f[:-len("_metal.cc")] + "_op.cc" in glob(["kernels/*/*_op.cc"]' in build
    assert "glob(METAL_MM_SRCS" in build and "glob(METAL_SHADER_SRCS" in build
    assert "glob(GRAPPLER_SRCS" in build
    assert 'name = "_metal_ops.so"' in build and 'name = "_metal_ops_grappler.so"' in build
    assert "linkshared = True" in build


def test_every_header_an_op_source_includes_is_declared_to_bazel():
    """A project header missing from BUILD's hdrs globs breaks only `make bazel`
    (Bazel's undeclared-inclusion check); catch it here."""
    declared = set(_expand(_bazel_list("PROJECT_HDRS")))
    sources = [f for name in ("OP_LIBRARY_SRCS", "METAL_MM_SRCS", "GRAPPLER_SRCS") for f in _bazel_files(name)]
    missing = {}
    for src in sources:
        for inc in re.findall(r'^\s*#\s*(?:include|import)\s+"([^"]+)"', _read(src), re.M):
            if os.path.exists(os.path.join(ROOT, inc)) and inc not in declared:
                missing.setdefault(src, []).append(inc)
    assert not missing, f"headers not matched by BUILD's PROJECT_HDRS: {missing}"


def test_offline_shims_forward_to_native_rules():
    cc = _read("third_party/rules_cc/cc/defs.bzl")
    java = _read("third_party/rules_java/java/defs.bzl")
    for name in ("cc_binary", "cc_library", "cc_import", "cc_test", "cc_toolchain"):
        assert f"{name} = native.{name}" in cc
    for name in ("java_binary", "java_library", "java_import", "java_toolchain", "java_runtime"):
        assert f"{name} = native.{name}" in java


def test_bazel_offline_rc_points_at_this_checkout(tmp_path):
    env = dict(os.environ)
    out = subprocess.run(["bash", "tools/build/bazel_build.sh", "--write-rc"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rc = _read("build/bazel-offline.bazelrc")
    for repo in ("rules_cc", "rules_java"):
        line = f"build:offline --override_repository={repo}={ROOT}/third_party/{repo}"
        assert line in rc
        assert os.path.isfile(os.path.join(ROOT, "third_party", repo, "WORKSPACE"))
    assert "try-import %workspace%/build/bazel-offline.bazelrc" in _read(".bazelrc")


def test_bazelversion_is_a_7x_release():
    assert re.fullmatch(r"7\.\d+\.\d+\n?", _read(".bazelversion"))


def _load_setup_py():
    spec = importlib.util.spec_from_file_location("metal_ops_setup", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() runs only as __main__
    return module


def test_setup_requires_no_tensorflow_and_offers_pinned_extras():
    """No TensorFlow requirement (it would install a second TensorFlow beside a
    user's other distribution); extras pinned to the minor version built against."""
    import tensorflow as tf

    setup_py = _load_setup_py()
    major, minor = (int(v) for v in tf.__version__.split(".")[:2])
    extras = setup_py._extras()
    assert extras["cpu"] == [f"tensorflow-cpu>={major}.{minor},<{major}.{minor + 1}; sys_platform == 'linux'"]
    assert extras["and-cuda"] == [f"tensorflow[and-cuda]>={major}.{minor},<{major}.{minor + 1}; sys_platform == 'linux'"]
    assert not any(r.startswith("tensorflow") for r in setup_py._openblas_requirement())
    macos = setup_py._requirements.extras("2.19.1", "Darwin-arm64", metal_version="1.2.0")
    assert macos == {"cpu": ["tensorflow>=2.19,<2.20; sys_platform == 'darwin'"],
                     "metal": ["tensorflow>=2.19,<2.20; sys_platform == 'darwin'",
                               "tensorflow-metal==1.2.0; sys_platform == 'darwin'"]}
    # a source build against TensorFlow 2.21 on a Mac: no tensorflow-metal loads with it
    assert setup_py._requirements.extras("2.21.0", "Darwin-arm64", metal_version="1.2.0") == \
        {"cpu": ["tensorflow>=2.21,<2.22; sys_platform == 'darwin'"]}


def test_setup_tags_wheels_py3_none():
    setup_py = _load_setup_py()
    dist = setup_py.BinaryDistribution({"name": "tf-metal-ops", "version": "0"})
    cmd = setup_py.BdistWheelPy3(dist)
    cmd.plat_name = "manylinux_2_27_x86_64"
    cmd.ensure_finalized()
    assert cmd.get_tag() == ("py3", "none", "manylinux_2_27_x86_64")


def test_setup_make_command_builds_into_the_wheel_tree_without_a_venv(tmp_path):
    """`make -n` of the pip hook's command: nothing creates a venv or installs
    requirements, and the library and build info land in PKG."""
    setup_py = _load_setup_py()
    pkg = tmp_path / "wheel" / "metal_ops"
    build = tmp_path / "make"
    cmd = setup_py.make_command(str(pkg), str(build), python=sys.executable)
    assert cmd[:4] == ["make", "-C", ROOT, "all"]
    dry = subprocess.run(cmd[:1] + ["-n"] + cmd[1:], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout
    assert "-m venv" not in text and "pip install" not in text and ".installed" not in text, text
    assert f"{pkg}/_metal_ops.so" in text, text
    assert f"--out {pkg}/_build_info.json" in text, text
    assert not (build / "no-venv").exists()
    assert f"{ROOT}/python/metal_ops/_metal_ops.so" not in text


def test_check_op_library_finds_declared_ops():
    from tools.check import check_op_library

    ops = check_op_library.declared_ops()
    assert "ZeroOut" in ops
    assert all(n == "ZeroOut" or n.startswith("MetalOps") for n in ops), sorted(ops)


# ---- every op's files, found by its name -------------------------------------------------
def _files_of(op):
    """The files the op shape (docs/ADDING_AN_OP.md) asks of an op, from what
    its folder holds: the CUDA glue and harness where it has a CUDA source,
    the Metal file where it has a shader, the XLA handlers' file where it has
    XLA kernels."""
    d = folder(op)
    want = [f"{d}/{op}.h", f"{d}/{op}_op.cc", f"{d}/{op}_cpu.cc", f"python/metal_ops/{op}.py",
            f"benchmarks/bench_{op}.py", f"docs/{op.upper()}.md"]
    have = named(d, op)
    if f"{op}.cu.cc" in have:
        want += [f"{d}/{op}_cuda.cc", f"tests/cuda/{op}_harness.cu.cc", f"tests/cuda/test_{op}_cuda.py"]
    if f"{op}.metal" in have:
        want += [f"{d}/{op}_metal.cc", f"tests/metal_shim/{op}_shim.cc"]
    if f"{op}_metal.mm" in have:
        want.append(f"{d}/{op}_metal.cc")
    return want


def _cuda_parts(op, have):
    """An op's further CUDA translation units beside <op>.cu.cc,
    <op>_<part>.cu.cc, and the device headers only they include,
    <op>_<part>.h (docs/ADDING_AN_OP.md; FusedMLP's)."""
    if f"{op}.cu.cc" not in have:
        return []
    units = [f for f in have if re.fullmatch(rf"{re.escape(op)}_\w+\.cu\.cc", f)]
    headers = []
    for header in have:
        if re.fullmatch(rf"{re.escape(op)}_\w+\.h", header):
            includers = [f for f in have if f'#include "{folder(op)}/{header}"' in _read(f"{folder(op)}/{f}")]
            if includers and set(includers) <= set(units):
                headers.append(header)
    return units + headers


def _op_shape_table():
    """The files of docs/ADDING_AN_OP.md's op-shape table, as <op> patterns."""
    text = _read("docs/ADDING_AN_OP.md")
    table = text[text.index("<!-- op-shape"):].split("\n\n", 1)[0]
    return re.findall(r"^\| `kernels/<op>/([^`]+)` \|", table, re.M)


def test_op_shape_folders_hold_the_files_the_guide_names_and_no_other():
    """An op-shaped folder holds the files of docs/ADDING_AN_OP.md's table
    (at most 8, each named by its backend; <op>_metal.mm, an MPSGraph op's,
    in place of <op>.metal): the header, the op definition and the CPU file
    always, the CUDA glue with a CUDA source, the Metal file with a shader or
    MPSGraph, and nothing the table does not name."""
    shape = _op_shape_table()
    assert len(shape) == 9 and "<op>.h" in shape and "<op>_metal.cc" in shape, shape
    assert {"trunc_exp", "sh_encode", "scene_contract"} <= set(OPS)
    for op in OPS:
        have = set(os.listdir(os.path.join(ROOT, folder(op))))
        extra = have - {f.replace("<op>", op) for f in shape}
        parts = _cuda_parts(op, have)
        extra -= set(parts)
        assert not extra, f"{folder(op)} holds files the op shape does not name: {sorted(extra)}"
        assert not {f"{op}.metal", f"{op}_metal.mm"} <= have, f"{folder(op)}: a shader or MPSGraph, not both"
        assert len(have) <= (12 if parts else 8), f"{folder(op)} holds {len(have)} files: {sorted(have)}"
        missing = [f for f in _files_of(op) if not os.path.isfile(os.path.join(ROOT, f))]
        assert not missing, f"op {op}: missing {missing}"


def test_ops_are_found():
    assert {"zero_out", "hash_encode", "robust_loss", "distortion_loss", "volume_render", "fused_mlp"} <= set(OPS)


@pytest.mark.parametrize("op", OPS)
def test_every_file_of_an_op_is_found_by_its_name(op):
    missing = [f for f in _files_of(op) if not os.path.isfile(os.path.join(ROOT, f))]
    if not glob.glob(os.path.join(ROOT, "tests", f"test_{op}*.py")):
        missing.append(f"tests/test_{op}*.py")
    readme_rows = [line for line in _read("README.md").splitlines() if line.startswith("|")]
    if not any(f"(docs/{op.upper()}.md)" in line for line in readme_rows):
        missing.append(f"a README ops-table row linking docs/{op.upper()}.md")
    assert not missing, f"op {op}: missing {missing}"


# ---- the Linux wheel's levels: the sources the level does not speed up compile once ----

# What a source compiled once at the baseline must not include: the CPU
# functors and loops, and what picks a SIMD path from the target's macros.
_LEVEL_HEADERS = re.compile(r'#include "kernels/(\w+/\w+_(functor|cpu)\.h|cpu/simd\.h|framework/x86_intrinsics\.h)"')


@pytest.mark.parametrize("args", [(), ("PORTABLE=1", "ISA=x86-64-v3")], ids=["native", "level"])
def test_isa_common_sources_hold_no_cpu_kernel_code(tmp_path, args):
    """The -march=native library and every level's library of the Linux wheel
    link ISA_COMMON_SRCS compiled once, at the baseline (docs/BUILDING.md,
    "Wheels"): none includes a CPU functor or SIMD header (the XLA host
    handlers, which run the functors, live in <op>_kernels.cc, compiled with
    the library's own flags), and each library links its own objects first,
    then the common ones, each source once."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the common objects are an x86-64 Linux build's")
    own_dir, common_dir = tmp_path / "build", f"{tmp_path}/isa-common"  # make_database's BUILD
    variables = make_database(tmp_path, *args, f"ISA_COMMON={common_dir}")
    common = variables["ISA_COMMON_SRCS"].split()
    assert "kernels/sh_encode/sh_encode_xla.cc" in common and op_definition("sh_encode") in common
    assert "kernels/sh_encode/sh_encode_metal.cc" in common  # the op shape's Metal plans
    for source in common:
        found = _LEVEL_HEADERS.search(_read(source))
        assert not found, f"{source} is compiled once for every ISA level but includes {found.group(0)}"
    objs = variables["OBJS"].split()
    own = [o for o in objs if o.startswith(f"{own_dir}/")]
    shared = [o for o in objs if o.startswith(f"{common_dir}/")]
    # the op definitions and the XLA kernels are a unit each among the common objects (Makefile, "Units")
    units = variables["UNIT_SRCS"].split()
    assert {op_definition("sh_encode"), "kernels/sh_encode/sh_encode_xla.cc"} <= set(units) <= set(common)
    assert objs == own + shared and len(shared) == len(common) - len(units) + 2, objs
    assert shared[-2:] == [f"{common_dir}/gen/op_definitions.o", f"{common_dir}/gen/xla_kernels.o"], shared
    assert f"{own_dir}/obj/kernels/sh_encode/sh_encode_cpu.o" in own


# ---- the Makefile on a Mac: CPU count without nproc, warnings that do not stop a user's build ----

def make_database(tmp_path, *args, env=None):
    """`make -pn help` (the variables make ends up with) without building or
    installing anything: BUILD in tmp_path, the included tf_flags.mk left alone."""
    build = tmp_path / "build"
    result = subprocess.run(["make", "-pn", f"BUILD={build}", "-o", f"{build}/tf_flags.mk", *args, "help"],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\w+) :?= ?(.*)$", result.stdout, re.M)}


def test_make_counts_cpus_with_sysctl_where_nproc_is_missing(tmp_path):
    # macOS has no nproc: `sysctl -n hw.ncpu` gives the count (a stand-in here,
    # on a PATH of this machine's tools without nproc).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            target = os.path.join(folder, name)
            if name not in ("nproc", "sysctl") and not (bin_dir / name).exists() and os.access(target, os.X_OK):
                (bin_dir / name).symlink_to(target)
    (bin_dir / "sysctl").write_text('#!/bin/sh\n[ "$*" = "-n hw.ncpu" ] && echo 7\n')
    (bin_dir / "sysctl").chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir))
    variables = make_database(tmp_path, env=env)
    assert variables["JOBS"] == "7"
    assert "-j7" in variables["MAKEFLAGS"].split()


@pytest.mark.parametrize("args,werror", [((), True), (("UNAME_S=Darwin",), False),
                                         (("UNAME_S=Darwin", "MACOS_CROSS=1"), True),
                                         (("UNAME_S=Darwin", "WERROR=-Werror"), True)])
def test_warnings_stop_the_build_except_a_macs_own(tmp_path, args, werror):
    # -Werror has met Debian's g++ and clang 14 only: a user's Xcode may warn
    # about what they never did. metal-check (the cross build) keeps it, and
    # passes it to the Objective-C++ files too (METAL_WERROR).
    variables = make_database(tmp_path, *args)
    assert ("-Werror" in variables["WARN"].split()) == werror, variables["WARN"]


def test_metal_check_keeps_werror_on_the_objective_c_files():
    with open(os.path.join(ROOT, "tools", "check", "metal_check.sh"), encoding="utf-8") as f:
        text = f.read()
    assert "METAL_WERROR=-Werror metal-check-build" in text
