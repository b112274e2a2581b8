"""The ops' Metal plans run through the MSL shim inside TensorFlow
(METAL_OPS_METAL=shim, docs/ARCHITECTURE.md "Metal plans"): each op's test
module runs again in a child process whose CPU kernels send every call's plan
to the shim executor, which runs the plan's shaders (compiled as C++) with the
plan's bindings, grids, threadgroup memory and zero-fills, and the module's
NumPy references check the results. Also: the executor's own checks, and the
path the library reports."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import metal_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM_EXEC = os.path.join(ROOT, "build", "libmetal_ops_shim_exec.so")

# The op test modules whose ops have Metal plans, rerun through the shim.
PLANNED_MODULES = [
    "tests/test_zero_out.py",
    "tests/test_trunc_exp.py",
    "tests/test_sh_encode.py",
    "tests/test_scene_contract.py",
    "tests/test_robust_loss.py",
    "tests/test_distortion_loss.py",
    "tests/test_volume_render.py",
    "tests/test_hash_encode.py",
]


def child_env(**extra):
    env = dict(os.environ)
    env.update({"METAL_OPS_METAL": "shim", "METAL_OPS_SHIM_EXEC_LIB": SHIM_EXEC})
    env.update(extra)
    return env


def run_child(code, **extra):
    result = subprocess.run([sys.executable, "-c", code], env=child_env(**extra), capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    return result


@pytest.fixture(scope="module", autouse=True)
def shim_exec_built():
    if not os.path.exists(SHIM_EXEC):
        pytest.fail(f"{SHIM_EXEC} is missing: run `make metal-shim` (make test does)")


@pytest.mark.parametrize("module", PLANNED_MODULES)
def test_op_module_through_the_shim(module, tmp_path):
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", module, "-q", "-x", "-p", "no:cacheprovider", "-p", "tests.metal_shim.plan_report"],
        env=child_env(METAL_OPS_PLAN_REPORT=str(report)), capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["path"] == "shim", data
    assert data["passed"] > 0 and data["plans"] > 0, data
    print(f"{module}: {data['passed']} cases passed through the shim ({data['plans']} plans, {data['passes']} passes)")


def test_path_reported():
    out = run_child("from metal_ops import metal_path; import metal_ops, tensorflow as tf;"
                    "print(metal_path.active_metal_path()[0]); metal_ops.trunc_exp(tf.ones([5]));"
                    "print(metal_path.metal_runs())")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split()
    assert lines[0] == "shim"
    assert "(1," in out.stdout  # one plan of one pass


def test_path_off_and_unknown():
    out = run_child("from metal_ops import metal_path; print(metal_path.active_metal_path())", METAL_OPS_METAL="0")
    assert "'cpu'" in out.stdout, out.stderr[-2000:]
    out = run_child("from metal_ops import metal_path; print(metal_path.active_metal_path())", METAL_OPS_METAL="bogus")
    assert "'unavailable'" in out.stdout and "not one of 0, 1, shim" in out.stdout, out.stderr[-2000:]


def test_own_queue_asked_for_on_linux_is_an_error_naming_the_op():
    out = run_child("import metal_ops, tensorflow as tf; metal_ops.trunc_exp(tf.ones([5]))", METAL_OPS_METAL="1")
    assert out.returncode != 0
    assert "MetalOpsTruncExp" in out.stderr and "METAL_OPS_METAL=1" in out.stderr and "no Metal" in out.stderr


def test_shim_library_missing_is_an_error_saying_how_to_build_it(tmp_path):
    out = run_child("import metal_ops, tensorflow as tf; metal_ops.trunc_exp(tf.ones([5]))",
                    METAL_OPS_SHIM_EXEC_LIB=str(tmp_path / "none.so"))
    assert out.returncode != 0
    assert "make metal-shim" in out.stderr


def test_small_work_stays_on_the_cpu_below_the_threshold():
    out = run_child("import metal_ops, tensorflow as tf; from metal_ops import metal_path;"
                    "metal_ops.trunc_exp(tf.ones([5])); metal_ops.trunc_exp(tf.ones([50]));"
                    "print(metal_path.metal_runs())", METAL_OPS_METAL_MIN_WORK="10")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(1, 1)" in out.stdout  # only the 50-element call


def test_this_process_runs_the_cpu_kernels():
    # The parent suite runs without METAL_OPS_METAL: the CPU kernels compute.
    if os.environ.get("METAL_OPS_METAL"):
        pytest.skip("METAL_OPS_METAL is set for this run")
    before = metal_path.metal_runs()
    np.testing.assert_allclose(metal_ops.trunc_exp(tf.constant([0.0, 1.0])).numpy(), [1.0, np.e], rtol=1e-6)
    assert metal_path.metal_runs() == before
