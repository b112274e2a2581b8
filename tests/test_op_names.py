"""An op lives in its own places; the shared code finds it by name (tests/op_files.py)
instead of naming it, so that adding an op edits no shared file
(docs/ADDING_AN_OP.md).

An op's own places: its folder (kernels/<op>/), the files named after it
(<op>.<ext>, <op>_*, test_<op>*, bench_<op>* and the like, wherever they are:
python/metal_ops/<op>.py, its reference, its tests), and the
package's __init__.py and layers.py, which export it. Shared code is every
other source file of the library and its test harness (python/, kernels/,
grappler/, runtime/, the build files, and tests/ but for the test
modules themselves): an op's name stands in at most one of them.
"""
import os
import re

import pytest

from tests import op_files

pytestmark = pytest.mark.source_tree("the op folders and the shared code files")

ROOT = op_files.ROOT
SHARED_DIRS = ("python", "kernels", "grappler", "runtime", "tests")
SHARED_FILES = ("Makefile", "BUILD", "setup.py")
EXTENSIONS = (".py", ".cc", ".h", ".mm", ".metal", ".cu", ".sh")
EXPORTS = ("python/metal_ops/__init__.py", "python/metal_ops/layers.py")
# Shared code files that name an op today, more than one for the op: each
# entry may only go (the test fails when one no longer names its op).
# They are the formulas and launch helpers two ops share (activations, the
# renderers' arguments), and the tools that build one op's graphs (fusion).
KNOWN = {
    "fused_conv2d": {"grappler/fusion_plugin.cc", "kernels/common/activations.h", "kernels/cuda/cublas_gemm.h",
                     "kernels/cuda/output_stage.h", "kernels/metal_plan/executor.cc", "python/metal_ops/fusion.py",
                     "tests/metal_shim/metal_rules_shim.cc"},
    "fused_mlp": {"kernels/common/activations.h", "kernels/cpu/activations_simd.h", "kernels/cuda/output_stage.h",
                  "kernels/cuda/sum_parts.h", "tests/activation_codes.py", "tests/cuda/harness.py"},
    "hash_encode": {"kernels/cuda/sum_parts.h", "kernels/metal/embedded_sources.h", "tests/cuda/harness.py"},
    "packed_volume_render": {"kernels/common/render_args.h", "kernels/metal/metal_kernel.h",
                             "tests/reference/render_testing.py"},
    "robust_loss": {"kernels/common/platform.h"},
    "trunc_exp": {"kernels/common/activations.h", "kernels/cpu/activations_simd.h", "kernels/metal_plan/plan.h"},
    "volume_render": {"kernels/common/render_args.h"},
}


def _own(path, op):
    name = os.path.basename(path)
    return (path.startswith(op_files.folder(op) + "/")
            or re.match(rf"(test_|test_fuzz_|bench_|sanitize_)?{re.escape(op)}[._]", name) is not None)


def shared_code():
    """Every shared source file (relative path), read once."""
    paths = [p for p in SHARED_FILES if os.path.isfile(os.path.join(ROOT, p))]
    for top in SHARED_DIRS:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "build")]
            for name in files:
                path = os.path.relpath(os.path.join(dirpath, name), ROOT)
                if name.endswith(EXTENSIONS) and not re.match(r"test_.*\.py$", name):
                    paths.append(path)
    paths = [p for p in paths if p not in EXPORTS and not any(_own(p, op) for op in op_files.OPS)]
    return {p: open(os.path.join(ROOT, p), encoding="utf-8", errors="replace").read() for p in sorted(paths)}


SHARED = shared_code()


def name_pattern(op):
    """The op's names: snake case (sh_encode, metal_ops_sh_encode_grad) and
    camel case (SHEncode, MetalOpsSHEncodeGrad), any case, whole words (not
    hash_encode, ray_march_static or RayMarchStatic)."""
    camel = op.replace("_", "")
    return re.compile(rf"(?:(?<![a-z0-9_])|(?<=metal_ops_)){re.escape(op)}(?:(?![a-z0-9_])|(?=_grad))"
                      rf"|(?:(?<![a-z0-9])|(?<=metalops)){re.escape(camel)}(?:(?![a-z0-9])|(?=grad))", re.IGNORECASE)


def naming(op):
    pattern = name_pattern(op)
    return sorted(p for p, text in SHARED.items() if pattern.search(text))


def test_the_pattern_finds_an_op_by_each_of_its_names():
    pattern = name_pattern("sh_encode")
    for text in ("sh_encode(x)", "MetalOpsSHEncode", "lib.metal_ops_sh_encode_grad", "SHEncode's degree",
                 "MetalOpsSHEncodeGrad"):
        assert pattern.search(text), text
    for text in ("hash_encode", "MetalOpsHashEncode", "sh_encoder"):
        assert not pattern.search(text), text
    assert not name_pattern("ray_march").search("ray_march_static and MetalOpsRayMarchStatic")
    assert "tests/op_files.py" in SHARED and "python/metal_ops/selftest.py" in SHARED
    some_op = op_files.OPS[0]
    assert f"python/metal_ops/{some_op}.py" not in SHARED and not any(p.startswith("kernels/" + some_op) for p in SHARED)


@pytest.mark.parametrize("op", op_files.OPS)
def test_an_op_stands_in_at_most_one_shared_code_file(op):
    found = naming(op)
    known = KNOWN.get(op, set())
    assert not known - set(found), f"{op} no longer named in {sorted(known - set(found))}: drop them from KNOWN"
    beyond = sorted(set(found) - known)
    assert len(beyond) <= 1, f"{op} is named in {len(beyond)} shared code files: {beyond}"
