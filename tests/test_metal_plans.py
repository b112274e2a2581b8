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
from tests.op_files import metal_planned_ops

pytestmark = pytest.mark.source_tree("the Metal shaders (the MSL shim executor)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM_EXEC = os.path.join(ROOT, "build", "libmetal_ops_shim_exec.so")

# The test module of every op with a Metal plan (kernels/<op>/<op>_plan.h,
# which its CPU functor offers the work to: cpu::RunOnMetal), rerun through
# the shim; an op with a plan and no
# tests/test_<op>.py fails its run.
PLANNED_MODULES = [f"tests/test_{op}.py" for op in metal_planned_ops()]

# The tests left out there, and why.
# The shim runs a threadgroup's threads one after another, so it cannot show a
# thread-count dependence (and the two child runs take 90 s).
LEFT_OUT = {"tests/test_fused_mlp.py": ["test_weight_gradients_are_bitwise_the_same_for_any_thread_count"]}


def child_env(**extra):
    # The plans run inside the CPU kernels: the child hides CUDA GPUs, so on a
    # GPU machine TensorFlow still places the ops on the CPU.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
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


def test_the_planned_ops_are_found():
    """The plan files are found (a search that found none would rerun nothing)."""
    assert {"zero_out", "sh_encode", "volume_render", "hash_encode", "ray_march", "fused_mlp"} <= set(metal_planned_ops())
    assert set(LEFT_OUT) <= set(PLANNED_MODULES)


@pytest.mark.parametrize("module", PLANNED_MODULES)
def test_op_module_through_the_shim(module, tmp_path):
    report = tmp_path / "report.json"
    left_out = ["-k", " and ".join(f"not {name}" for name in LEFT_OUT[module])] if module in LEFT_OUT else []
    result = subprocess.run(
        [sys.executable, "-m", "pytest", module, "-q", "-x", "-p", "no:cacheprovider", "-p", "tests.metal_shim.plan_report"]
        + left_out,
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


def test_every_planned_op_is_rerun_and_every_module_exists():
    for module in PLANNED_MODULES:
        assert os.path.exists(os.path.join(ROOT, module)), module


RAY_MARCH = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
from tests.op_files import metal_planned_ops
rng = np.random.default_rng(0)
R, G = 64, 16
o = np.tile(np.float32([0, 0, -2]), (R, 1))
d = np.tile(np.float32([0, 0, 1]), (R, 1)) + rng.uniform(-0.2, 0.2, (R, 3)).astype(np.float32)
near, far = np.zeros(R, np.float32), np.full(R, 4.0, np.float32)
occ = np.full((1, G ** 3 // 8), {fill}, np.uint8)
before = metal_path.metal_runs()
out = metal_ops.ray_march(o, d, near, far, occ, [-1, -1, -1, 1, 1, 1], G, 0.05)
after = metal_path.metal_runs()
print(int(out[0].shape[0]), after[0] - before[0], after[1] - before[1])
"""


@pytest.mark.parametrize("fill,plans,passes", [(255, 2, 5), (0, 1, 4)])
def test_ray_march_counts_then_reads_the_total_then_fills(fill, plans, passes):
    """RayMarch is two plans: the count (count, chunk sums, their scan with the
    total, the offsets), its total read on the host after that plan completed,
    then the fill; none when no ray has a sample."""
    out = run_child(RAY_MARCH.format(fill=fill))
    assert out.returncode == 0, out.stderr[-3000:]
    samples, got_plans, got_passes = map(int, out.stdout.split()[-3:])
    assert (samples > 0) == (fill == 255)
    assert (got_plans, got_passes) == (plans, passes)


PVR_BAD = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
from tests.op_files import metal_planned_ops
from tests.reference.packed_volume_render import make_packed
p = [np.array(a) for a in make_packed([3, 2, 4], seed=0)]
p[{index}][{at}] = {value}
before = metal_path.metal_runs()
try:
    metal_ops.packed_volume_render(*p, return_weights=True)
    print("no error")
except tf.errors.InvalidArgumentError as e:
    print("InvalidArgument:", e.message)
after = metal_path.metal_runs()
print(after[0] - before[0], after[1] - before[1])
"""


@pytest.mark.parametrize("index,at,value,message", [
    (5, 1, -1, "'ray_counts' must be >= 0: ray 1 has count -1"),
    (4, 2, 4, "ray 2 has offset 4, expected 5"),
    (0, 4, "np.nan", "sample 4 (ray 1) has sigma = nan"),
    (3, 6, "p[2][6] - 0.5", "'t_ends' must be >= 't_starts'"),
])
def test_packed_volume_render_errors_come_from_the_validation_passes(index, at, value, message):
    """The plan's validation passes (check_chunks, check_first), then the
    weights' zero-fill and the render: the error is read from the check slot
    after the plan ran, the CPU kernel computes nothing."""
    out = run_child(PVR_BAD.format(index=index, at=at, value=value))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "InvalidArgument:" in out.stdout and message in out.stdout, out.stdout
    assert out.stdout.split()[-2:] == ["1", "4"], out.stdout


CONV = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
from tests.op_files import metal_planned_ops
rng = np.random.default_rng(1)
x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
b = rng.standard_normal(4).astype(np.float32)
before = metal_path.metal_runs()
got = metal_ops.fused_conv2d(x, w, bias=b, activation="relu").numpy()
want = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + b).numpy()
print(float(np.max(np.abs(got - want))), metal_path.metal_runs()[0] - before[0])
print(metal_path.active_metal_path()[1])
"""


def test_fused_conv2d_has_no_plan_and_computes_on_the_cpu_and_the_path_says_so():
    out = run_child(CONV)
    assert out.returncode == 0, out.stderr[-3000:]
    first, reason = out.stdout.strip().splitlines()[-2:]
    err, plans = first.split()
    assert float(err) < 1e-4 and int(plans) == 0
    assert "FusedConv2D" in reason and "compute on the CPU" in reason
