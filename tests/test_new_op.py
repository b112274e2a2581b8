"""tools/new_op.py, the op scaffold (docs/ADDING_AN_OP.md): it writes every
file of its model op under the new name, and the op it writes builds and
passes its tests. Both run in a copy of the tree; the build copies the built
tree (`cp -a`, timestamps kept), so that `make` compiles only the new op's
files and the units that list it."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests import op_files
from tests.child_env import child_env

pytestmark = pytest.mark.source_tree("tools/new_op.py and the model ops' sources")

ROOT = op_files.ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import new_op  # noqa: E402

# What the scaffold reads: the model's files, the shared code and the shared files it edits.
SOURCES = ("kernels", "python", "tests", "benchmarks", "docs", "tools", "README.md")
NAME = "scaffold_probe"


def source_copy(dest):
    """The sources the scaffold reads, copied under dest (no build)."""
    keep_out = shutil.ignore_patterns("__pycache__", "*.so", "results", "data")
    for entry in SOURCES:
        src = os.path.join(ROOT, entry)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, entry), ignore=keep_out)
        else:
            shutil.copy2(src, os.path.join(dest, entry))
    return str(dest)


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("model", new_op.MODELS)
def test_scaffold_writes_every_file_of_its_model_under_the_new_name(tmp_path, model):
    root = source_copy(tmp_path)
    written = new_op.scaffold(root, NAME, model)
    old, new = new_op.model_names(root, model), new_op.Names(NAME, new_op.camel_of(NAME))
    assert new.camel == "ScaffoldProbe"
    want = [re.sub(model, NAME, p).replace(model.upper(), new.upper) for p in new_op.model_files(root, model)]
    assert written == want
    # The op shape: the folder holds the model's files, and what the build and
    # the tests ask of an op is there.
    assert sorted(os.listdir(os.path.join(root, "kernels", NAME))) == sorted(
        f.replace(model, NAME) for f in os.listdir(os.path.join(root, "kernels", model)))
    for path in [f"tests/test_{NAME}.py", f"tests/reference/{NAME}.py", f"python/metal_ops/_reference/{NAME}.py",
                 f"tests/cuda/{NAME}_harness.cu.cc", f"tests/metal_shim/{NAME}_shim.cc", f"docs/{new.upper}.md"]:
        assert path in written
    # No name of the model is left, but the shared code's (kActTruncExp).
    renamer = new_op.Renamer(old, new, new_op.shared_identifiers(root))
    for path in written:
        left = {w for w in re.findall(r"\w+", read(root, path)) if renamer.pattern.search(w)} - renamer.keep
        assert not left, f"{path} keeps the model's names {sorted(left)}"
    header = read(root, f"kernels/{NAME}/{NAME}.h")
    assert f"#define MO_SCAFFOLD_PROBE_ATTRS(ATTR)" in header
    assert 'MO_DECLARE_ATTRS("ScaffoldProbe", MO_SCAFFOLD_PROBE_ATTRS);' in header
    assert 'REGISTER_OP("MetalOpsScaffoldProbeGrad")' in read(root, f"kernels/{NAME}/{NAME}_op.cc")
    # The shared files name it beside its model.
    init = read(root, "python/metal_ops/__init__.py")
    assert f"    from metal_ops.{NAME} import {NAME}  # noqa: E402" in init and f'    "{NAME}",' in init
    readme = read(root, "README.md")
    assert f"| `metal_ops.{NAME}(" in readme and f"[{new.upper}](docs/{new.upper}.md)" in readme
    assert re.search(rf"^\| [^|]*`{model}`[^|]*`{NAME}` \|", readme, re.M)
    assert f"| ScaffoldProbe (`{NAME}`) | MetalOpsScaffoldProbe, MetalOpsScaffoldProbeGrad" in read(root, "docs/XLA.md")
    assert f"{NAME}: kernels/{NAME}/{NAME}.h ScaffoldProbeBuffers" in read(root, "docs/ARCHITECTURE.md")
    # An op that exists, or a name that is not snake_case, is refused.
    for name in (NAME, model, "ScaffoldProbe", "class"):
        with pytest.raises(SystemExit, match="new_op.py: "):
            new_op.scaffold(root, name, model)


def built_copy(dest):
    """The tree with its build (build/, the package's .so) under dest, times
    kept; the virtual environment linked, not copied; no hidden folder (.git,
    caches, a GPU host's toolchains) and no run's or data set's outputs."""
    for entry in os.listdir(ROOT):
        if entry.startswith(".") or entry in ("runs", "data", "dist", "wheelhouse"):
            continue
        subprocess.run(["cp", "-a", os.path.join(ROOT, entry), str(dest)], check=True)
    os.symlink(os.path.realpath(os.path.join(ROOT, ".venv")), os.path.join(dest, ".venv"))
    return str(dest)


@pytest.mark.slow
def test_scaffolded_op_builds_and_passes_its_tests(tmp_path):
    if not (os.path.isfile(os.path.join(ROOT, "python", "metal_ops", "_metal_ops.so"))
            and os.path.isfile(os.path.join(ROOT, "build", "tf_flags.mk"))
            and os.path.isfile(os.path.join(ROOT, ".venv", "bin", "python"))):
        pytest.skip("the tree has no build in its venv (`make all metal-shim` makes it; `make test` does)")
    root = built_copy(tmp_path)
    python = os.path.join(root, ".venv", "bin", "python")
    subprocess.run([python, "tools/new_op.py", NAME], cwd=root, check=True, stdout=subprocess.DEVNULL)
    # ENV=existing: the copy's make leaves the venv (shared with this tree) alone.
    build = subprocess.run(["make", "all", "build/libmetal_shim.so", "ENV=existing", f"PYTHON={python}"],
                           cwd=root, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    compiled = re.findall(r" -c (\S+)", build.stdout)
    assert f"kernels/{NAME}/{NAME}_cpu.cc" in compiled
    others = [c for c in compiled if c.startswith("kernels/") and f"/{NAME}/" not in c]
    assert not others, f"the copy compiled other ops' files too (is the tree's build current?): {others}"
    env = {k: v for k, v in child_env().items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    tests = [f"tests/test_{NAME}.py", f"tests/test_{NAME}_xla.py", f"tests/fuzz/test_fuzz_{NAME}.py",
             "tests/test_op_names.py", "tests/test_op_tables.py",
             "tests/test_build.py::test_op_shape_folders_hold_the_files_the_guide_names_and_no_other",
             f"tests/test_build.py::test_every_file_of_an_op_is_found_by_its_name[{NAME}]"]
    run = subprocess.run([python, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *tests],
                         cwd=root, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", run.stdout) and " failed" not in run.stdout
