"""The Metal host path executed here: every op's Metal plan runs inside
TensorFlow through the library's host path (kernels/metal_plan/host_path.h)
against the strict model of Metal (tests/metal_shim/metal_model.cc), whose
dispatches run the shaders compiled as C++ (docs/ARCHITECTURE.md "Metal
plans"). Each op's test module runs again in a child process whose CPU
kernels send every call's plan through one of the Mac's two routes: the own
queue (METAL_OPS_METAL=shim, as on TensorFlow 2.20+) and tensorflow-metal's
batching stream (shim-stream); the module's NumPy references check the
results and the model counts no broken rule. Also: the model's fault
injections (each a clear error or a CPU fallback), the no-copy binding of
ordinary tensors, the CPU kernels' determinism on the own queue, and the
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
from tests.metal_shim import model
from tests.op_files import metal_planned_ops

pytestmark = pytest.mark.source_tree("the Metal shaders (the strict model of Metal)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM_EXEC = os.path.join(ROOT, "build", "libmetal_ops_shim_exec.so")
ROUTES = ("shim", "shim-stream")
# On a Mac the module reruns alternate over the real own queue too
# (METAL_OPS_METAL=1, every call: minimum work 0).
RERUN_ROUTES = ROUTES + (("1",) if sys.platform == "darwin" else ())

# The test module of every op with a Metal plan (a shader, whose plans <op>_metal.cc defines,
# which its CPU functor supplies to cpu::MetalOrCpu), rerun through
# the model; an op with a plan and no
# tests/test_<op>.py fails its run.
PLANNED_MODULES = [f"tests/test_{op}.py" for op in metal_planned_ops()]
# GaussianTileBinStatic's plan is its op folder's (gaussian_tile_bin), its tests a module of their own.
PLANNED_MODULES.append("tests/test_gaussian_tile_bin_static.py")

# The tests left out there, and why.
# The model runs a threadgroup's threads one after another, so it cannot show
# a thread-count dependence (and its two child processes would add 22 s).
LEFT_OUT = {"tests/test_fused_mlp.py": ["test_weight_gradients_are_bitwise_the_same_for_any_thread_count"]}


def child_env(**extra):
    # The plans run inside the CPU kernels: the child hides CUDA GPUs, so on a
    # GPU machine TensorFlow still places the ops on the CPU.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.update({"METAL_OPS_METAL": "shim", "METAL_OPS_SHIM_EXEC_LIB": SHIM_EXEC,
                "PYTHONPATH": model.with_autoload(os.environ.get("PYTHONPATH", ""))})
    env.pop("METAL_OPS_MODEL_FAULTS", None)
    env.update(extra)
    return env


def run_child(code, **extra):
    """Runs `code` in a child process that loads the model of Metal first (model.PRELUDE)."""
    result = subprocess.run([sys.executable, "-c", model.PRELUDE + code], env=child_env(**extra), capture_output=True, text=True,
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
def test_op_module_through_the_model_on_both_routes(module, tmp_path):
    """The module runs once, its tests alternating between the own queue and
    the stream route on the model (and, on a Mac, the real own queue;
    tests/metal_shim/plan_report.py switches METAL_OPS_METAL before each),
    so every op's tests run through every route in the time of one rerun."""
    report = tmp_path / "report.json"
    left_out = ["-k", " and ".join(f"not {name}" for name in LEFT_OUT[module])] if module in LEFT_OUT else []
    result = subprocess.run(
        [sys.executable, "-m", "pytest", module, "-q", "-x", "-p", "no:cacheprovider", "-p", "tests.metal_shim.plan_report"]
        + left_out,
        env=child_env(METAL_OPS_PLAN_REPORT=str(report), METAL_OPS_PLAN_ROUTES=",".join(RERUN_ROUTES),
                      METAL_OPS_METAL_MIN_WORK="0"),
        capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["passed"] > 0, data
    for route in RERUN_ROUTES:
        assert data["routes"][route]["passed"] > 0 and data["routes"][route]["plans"] > 0, data
    assert data["model"]["violations"] == 0, data
    assert data["fallbacks"] == 0, data
    print(f"{module}: {data['passed']} cases passed through the model ({data['routes']}, host cost {data['cost']})")


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
    assert "'unavailable'" in out.stdout and "not one of 0, 1, shim, shim-stream" in out.stdout, out.stderr[-2000:]


@pytest.mark.skipif(sys.platform == "darwin", reason="a Mac has the own queue")
def test_own_queue_asked_for_without_metal_is_an_error_naming_the_op():
    out = run_child("import metal_ops, tensorflow as tf; metal_ops.trunc_exp(tf.ones([5]))", METAL_OPS_METAL="1")
    assert out.returncode != 0
    assert "MetalOpsTruncExp" in out.stderr and "METAL_OPS_METAL=1" in out.stderr and "no Metal" in out.stderr


def test_model_library_missing_is_an_error_saying_how_to_build_it(tmp_path):
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


def test_only_an_explicit_request_for_metal_turns_a_metal_failure_into_the_ops_error(monkeypatch):
    lib = metal_ops.load_library()
    import ctypes

    from metal_ops import _loader

    op_lib = ctypes.CDLL(_loader.library_path())
    for value, allowed in [(None, 1), ("shim", 1), ("shim-stream", 1), ("1", 0)]:
        if value is None:
            monkeypatch.delenv("METAL_OPS_METAL", raising=False)
        else:
            monkeypatch.setenv("METAL_OPS_METAL", value)
        assert op_lib.metal_ops_cpu_fallback_allowed() == allowed, value
    assert lib is not None


FAULTS = """
import os, sys, numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
x = np.linspace(-3, 3, 5000).astype(np.float32)
rng = np.random.default_rng(0)
xm = rng.standard_normal((256, 16)).astype(np.float32)
ks = [rng.standard_normal((16, 64)).astype(np.float32) * 0.2, rng.standard_normal((64, 4)).astype(np.float32) * 0.2]
bs = [np.zeros(64, np.float32), np.zeros(4, np.float32)]
def mlp_ref():
    return np.maximum(xm @ ks[0] + bs[0], 0) @ ks[1] + bs[1]
from tests.reference import hash_encode as ref
cfg, hx, ht, hdy = ref.determinism_case()
hash_args = [tf.constant(hdy), tf.constant(hx), tf.constant(ht)]
lib = metal_ops.load_library()
route = os.environ["METAL_OPS_METAL"]
for fault in sys.argv[1:]:
    os.environ["METAL_OPS_MODEL_FAULTS"] = fault
    before = metal_path.metal_runs()[0], metal_path.metal_fallbacks()
    try:
        if fault in ("no_apple7", "max_threads=16") or (fault == "nil_command_buffer" and route == "shim"):
            got, want = metal_ops.fused_mlp(xm, ks, bs, activation="relu").numpy(), mlp_ref()
        elif fault == "nil_encoder" and route == "shim":
            xt = tf.constant(x)
            with tf.GradientTape() as tape:
                tape.watch(xt)
                y = metal_ops.trunc_exp(xt)
            got, want = tape.gradient(y, xt).numpy(), np.exp(np.minimum(x, 15))
        elif fault == "nil_private":
            got = lib.metal_ops_hash_encode_grad(*hash_args, **cfg)[0].numpy()
            os.environ["METAL_OPS_METAL"] = "0"
            want = lib.metal_ops_hash_encode_grad(*hash_args, **cfg)[0].numpy()
            os.environ["METAL_OPS_METAL"] = route
        else:
            got, want = metal_ops.trunc_exp(x).numpy(), np.exp(x)
        outcome = "ok %.1e" % float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1)))
    except tf.errors.OpError as e:
        outcome = "error " + type(e).__name__ + " " + e.message.replace(chr(10), " ")
    print(fault, "|", outcome, "|", metal_path.metal_runs()[0] - before[0], metal_path.metal_fallbacks() - before[1])
print("model", _model.counters()["violations"])
"""

# fault: (outcome, words of the message or of the warning, plans run, fallbacks)
FAULT_CASES = {
    "compile": ("ok", "compiling the Metal shaders of 'trunc_exp' failed", 0, 1),
    "nil_buffer": ("ok", "Metal gave no buffer", 0, 1),
    "nil_private": ("ok", "Metal gave no buffer for scratch buffer 0", 0, 1),
    "max_buffer=4096": ("ok", "above the device's maxBufferLength of 4096", 0, 1),
    "no_apple7": ("ok", "MTLGPUFamilyApple7", 0, 1),
    "max_threads=16": ("ok", "threads per threadgroup", 0, 1),  # below one SIMD-group: no FusedMLP geometry
    "gpu_error": ("error InternalError", "the GPU failed the command buffer (kernels: trunc_exp_forward_float32)", 0, 0),
    "nil_encoder": ("error InternalError", "gave no compute command encoder", 0, 0),
    "nil_command_buffer": ("error InternalError", "gave no command buffer", 0, 0),
}
# On the own queue a GPU-side failure turns Metal off for the op (one warning)
# and the CPU computes the call: fault: the op it is injected into there.
GPU_FAILURES = {"gpu_error": "MetalOpsTruncExp", "nil_encoder": "MetalOpsTruncExpGrad",
                "nil_command_buffer": "MetalOpsFusedMLP"}


@pytest.mark.parametrize("route", ROUTES)
def test_every_injected_fault_ends_in_a_clear_error_or_a_cpu_fallback(route):
    """A failure the CPU kernel does not have (a size, a compile, a missing GPU
    feature) computes on the CPU, with one warning naming the op and the
    reason; any other is the op's error naming what failed; never a crash.
    On the stream route a GPU error surfaces only where the op waits
    (tensorflow-metal's commit is batched and nothing in TensorFlow reads a
    custom op's command buffer): the debug mode METAL_OPS_GPU_SYNC=1 makes
    every op submit without holding the stream's queue and wait outside it."""
    faults = [f for f in FAULT_CASES
              if route == "shim" or f not in ("max_buffer=4096", "nil_command_buffer", "nil_private")]
    sync = {"METAL_OPS_GPU_SYNC": "1"} if route == "shim-stream" else {}
    out = subprocess.run([sys.executable, "-c", model.PRELUDE + FAULTS] + faults,
                         env=child_env(METAL_OPS_METAL=route, TF_CPP_MIN_LOG_LEVEL="0", **sync),
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = {line.split(" | ")[0]: line.split(" | ") for line in out.stdout.splitlines() if " | " in line}
    for fault in faults:
        outcome, words, plans, fallbacks = FAULT_CASES[fault]
        if route == "shim" and fault in GPU_FAILURES:
            outcome, fallbacks = "ok", 1
        _, got, counts = lines[fault]
        assert got.startswith(outcome), (fault, got)
        if outcome == "ok":
            assert float(got.split()[1]) < 1e-5, (fault, got)
        else:
            assert words in got and "MetalOpsTruncExp" in got, (fault, got)
        assert counts.split() == [str(plans), str(fallbacks)], (fault, counts)
    # One warning per op, naming it and the reason of its first fallback,
    # however many calls fell back; a scratch buffer Metal does not give is
    # such a reason (never bound as something else).
    warnings = [line for line in out.stderr.splitlines() if "computes on the CPU instead" in line]
    first = {"MetalOpsTruncExp": "compile", "MetalOpsFusedMLP": "no_apple7"}
    if "nil_private" in faults:
        first["MetalOpsHashEncodeGrad"] = "nil_private"
    assert len(warnings) == len(first), warnings
    for op, fault in first.items():
        assert any(op + " (node" in w and FAULT_CASES[fault][1] in w for w in warnings), (op, warnings)
    turned_off = [line for line in out.stderr.splitlines() if "Metal is off for this op" in line]
    assert len(turned_off) == (len(GPU_FAILURES) if route == "shim" else 0), turned_off
    for fault, op in GPU_FAILURES.items() if route == "shim" else ():
        assert any(op + " (node" in w and FAULT_CASES[fault][1] in w for w in turned_off), (op, turned_off)


FIRST_CALLS = """
import json, os, numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
x = tf.constant(np.random.default_rng(0).random((4096, 3), dtype=np.float32))
grid = dict(num_levels=4, log2_hashmap_size=12, base_resolution=4, per_level_scale=2.0)
table = tf.constant(np.random.default_rng(1).random((metal_ops.hash_grid_size(3, **grid), 2), dtype=np.float32))
def call():
    counts = [(metal_path.metal_runs()[0], metal_path.metal_fallbacks())]
    with tf.GradientTape() as tape:
        tape.watch([x, table])
        y = metal_ops.hash_encode(x, table, **grid)
    counts.append((metal_path.metal_runs()[0], metal_path.metal_fallbacks()))
    grads = tape.gradient(y, [table, x])
    counts.append((metal_path.metal_runs()[0], metal_path.metal_fallbacks()))
    # (plans run on Metal, calls sent back to the CPU): of the forward, of the gradient
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(counts, counts[1:])]
    return [t.numpy() for t in [y] + grads], steps
first, first_steps = call()
compiled = _model.compiles()
os.environ["METAL_OPS_MODEL_FAULTS"] = "compile=hash_encode@hash_encode_input_grad_d3_f2_float32"
faulted, steps = call()
print(json.dumps({"compiled": compiled, "first_steps": first_steps, "steps": steps,
                  "same": all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(first, faulted))}))
"""


def test_a_first_call_compiles_only_the_instantiations_its_plans_name():
    """HashEncode's forward and backward (float32, D=3, F=2) on the own queue
    compile hash_encode.metal's body with each kernel their plans name, one
    at a time: never the library's 134 instantiations. A compile that fails
    for one kernel sends only the calls whose plans use it to the CPU."""
    out = run_child(FIRST_CALLS, TF_CPP_MIN_LOG_LEVEL="0")
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    # The forward, then the gradient's plan (deterministic by default: the
    # table gradient in 64-bit fixed point), in the order it encodes them.
    names = ["hash_encode_forward_d3_f2_float32", "hash_encode_zero_u32", "hash_encode_max_abs_float32",
             "hash_encode_table_grad_fixed_d3_f2_float32", "hash_encode_fixed_to_table_float32",
             "hash_encode_input_grad_d3_f2_float32"]
    assert got["compiled"] == [["hash_encode", name, 1] for name in names]
    # With input_grad's compile failing, in a fresh cache: the one gradient
    # call whose plan uses it computes on the CPU (one warning naming the
    # kernel), the same results; every other call keeps Metal.
    (forward, gradient), (first_forward, first_gradient) = got["steps"], got["first_steps"]
    assert forward == first_forward == [1, 0] and got["same"], got
    assert first_gradient[1] == 0 and gradient == [first_gradient[0] - 1, 1], got
    warnings = [line for line in out.stderr.splitlines() if "computes on the CPU instead" in line]
    assert len(warnings) == 1 and "MetalOpsHashEncodeGrad (node" in warnings[0], warnings
    assert ("compiling the Metal shaders of 'hash_encode' failed for kernel 'hash_encode_input_grad_d3_f2_float32'"
            in warnings[0]), warnings


ZERO_COPY = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
x = tf.constant(np.linspace(-3, 3, 1 << 16).astype(np.float32))
cost0, model0 = metal_path.host_cost(), _model.counters()
y = metal_ops.trunc_exp(x)
cost1, model1 = metal_path.host_cost(), _model.counters()
np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()), rtol=1e-6)
print({k: cost1[k] - cost0[k] for k in cost0}, model1["bytes_copied"] - model0["bytes_copied"], model1["violations"])
"""


def test_ordinary_tensors_are_bound_without_a_copy_on_the_own_queue():
    """TensorFlow's CPU tensors are 64-byte aligned: the page-rounded range
    around each is wrapped (newBufferWithBytesNoCopy) and the tensor bound at
    its offset, so a call copies nothing and waits once."""
    out = run_child(ZERO_COPY)
    assert out.returncode == 0, out.stderr[-3000:]
    cost, copied, violations = out.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert eval(cost) == {"bytes_in": 0, "bytes_out": 0, "wrapped": 2, "command_buffers": 1, "waits": 1}
    assert (int(copied), int(violations)) == (0, 0)


DETERMINISM = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
from tests.reference import hash_encode as ref
cfg, x, t, dy = ref.determinism_case()
lib = metal_ops.load_library()
before = metal_path.metal_runs()[0]
runs = [lib.metal_ops_hash_encode_grad(tf.constant(dy), tf.constant(x), tf.constant(t), **cfg) for _ in range(3)]
same_hash = all(r[0].numpy().tobytes() == runs[0][0].numpy().tobytes() for r in runs)
hash_plans = metal_path.metal_runs()[0] - before
rng = np.random.default_rng(0)
xs = tf.constant(rng.standard_normal((4096, 8)).astype(np.float32))
alpha, scale = tf.Variable(np.full(8, 1.5, np.float32)), tf.Variable(np.full(8, 0.7, np.float32))
grads = []
for _ in range(3):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(metal_ops.robust_loss(xs, alpha, scale))
    grads.append(b"".join(g.numpy().tobytes() for g in tape.gradient(loss, [alpha, scale])))
print(same_hash, hash_plans, len(set(grads)) == 1)
"""


def test_the_own_queue_keeps_the_cpu_kernels_bitwise_reproducible():
    """The CPU kernels promise the same bits from run to run; the model runs
    threadgroups in a different order at every dispatch, so a plan summing
    floats with atomics would break that: the table gradient takes the
    fixed-point plan, RobustLoss's parameter gradients stay on the CPU."""
    out = run_child(DETERMINISM)
    assert out.returncode == 0, out.stderr[-3000:]
    same_hash, hash_plans, same_robust = out.stdout.split()[-3:]
    assert same_hash == "True" and int(hash_plans) == 3 and same_robust == "True", out.stdout


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


TILE_BIN = """
import os, numpy as np, metal_ops
from metal_ops import metal_path
from tests.reference import gaussian_tile_bin as ref
m = np.array([[20.0, 20.0], [40.0, 8.0], [5.0, 30.0]], np.float32)
r, d = np.array([[10, 6], [30, 12], [0, 0]], np.int32), np.array([2.0, 1.0, 2.0], np.float32)
for fault in ["", "max_threads=16@gaussian_tile_bin_digits"]:
    os.environ["METAL_OPS_MODEL_FAULTS"] = fault
    before = metal_path.metal_runs(), metal_path.metal_fallbacks()
    ids, ranges = metal_ops.gaussian_tile_bin(m, r, d, width=50, height=40)
    after = metal_path.metal_runs(), metal_path.metal_fallbacks()
    want = ref.tile_bin(m, r, d, 50, 40)
    same = np.array_equal(ids.numpy(), want[0]) and np.array_equal(ranges.numpy(), want[1])
    print(same, after[0][0] - before[0][0], after[0][1] - before[0][1], after[1] - before[1])
"""


def test_gaussian_tile_bin_counts_then_sorts_and_a_threadgroup_too_large_computes_on_the_cpu():
    """GaussianTileBin is two plans: the count (tile counts, their scan), M
    read on the host, then the fill (the count and scan, the keys, five radix
    passes of three dispatches for 12 tiles' 36 key bits, the ranges). A
    radix threadgroup the pipeline cannot run is refused before anything is
    encoded: the CPU kernel computes, with one warning naming the kernel."""
    out = run_child(TILE_BIN, TF_CPP_MIN_LOG_LEVEL="0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-8:] == ["True", "2", "21", "0", "True", "1", "2", "1"], out.stdout
    warnings = [line for line in out.stderr.splitlines() if "computes on the CPU instead" in line]
    assert len(warnings) == 1 and "MetalOpsGaussianTileBin (node" in warnings[0], warnings
    assert "gaussian_tile_bin_digits: this GPU runs at most 16 threads per threadgroup" in warnings[0], warnings


TILE_BIN_STATIC = """
import numpy as np, metal_ops
from metal_ops import metal_path
from tests.reference import gaussian_tile_bin_static as ref
m = np.array([[20.0, 20.0], [40.0, 8.0], [5.0, 30.0], [44.0, 35.0]], np.float32)
r = np.array([[10, 6], [30, 12], [0, 0], [4, 4]], np.int32)
d = np.array([2.0, 1.0, 2.0, 0.5], np.float32)
for n, budget in [(4, 40), (4, 9), (4, 3), (0, 5)]:
    before = metal_path.metal_runs(), metal_path.metal_fallbacks()
    got = metal_ops.gaussian_tile_bin_static(m[:n], r[:n], d[:n], width=50, height=40, max_intersections=budget)
    after = metal_path.metal_runs(), metal_path.metal_fallbacks()
    want = ref.reference(m[:n], r[:n], d[:n], 50, 40, budget)
    same = all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want))
    print(same, int(got.num_gaussians), after[0][0] - before[0][0], after[0][1] - before[0][1], after[1] - before[1])
"""


def test_gaussian_tile_bin_static_is_one_plan_that_cuts_on_the_gpu():
    """GaussianTileBinStatic is one plan, nothing read between its passes: the
    count and scan, the cut, the kept Gaussians' keys, the padding, five radix
    passes of three dispatches (12 tiles: 36 key bits) and the ranges; with
    no Gaussian, the limits and counts zeroed instead of the first four. Its
    outputs are the reference's with every Gaussian kept, some and none."""
    out = run_child(TILE_BIN_STATIC)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines()[-4:]]
    assert rows == [["True", "4", "1", "21", "0"], ["True", "1", "1", "21", "0"], ["True", "0", "1", "21", "0"],
                    ["True", "0", "1", "20", "0"]], out.stdout


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


def test_the_host_cost_script_counts_a_call_on_the_own_queue():
    """tests/metal_shim/host_cost.py (the table in docs/METAL_COMPAT.md): a
    TruncExp call forward and backward on the own queue is two plans, two
    command buffers and two waits, with nothing copied and its five tensors
    (x, y; dy, x, dx) wrapped."""
    out = subprocess.run([sys.executable, "-m", "tests.metal_shim.host_cost", "--ops", "trunc_exp", "--nerf-steps", "0"],
                         env=child_env(), capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    row = [line for line in out.stdout.splitlines() if line.startswith("| trunc_exp:")]
    assert len(row) == 1, out.stdout
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[1:] == ["2", "2", "2", "0 / 0", "5"], row
