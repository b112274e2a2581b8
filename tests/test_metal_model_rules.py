"""The strict model of Metal (tests/metal_shim/metal_model.cc) fed a broken
use of each of its rules: every one is reported as a violation naming the
rule, and its correct twin is not, so the model cannot turn lenient without a
test failing. Also the faults a Mac can show on the own queue that the CPU
kernel does not have: a refused no-copy wrap (the tensors are copied in and
back), a pipeline narrower than the simdgroup_matrix shaders need."""
import ctypes
import os
import subprocess
import sys

import pytest

from tests.metal_shim import model as model_module

pytestmark = pytest.mark.source_tree("the strict model of Metal")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM_EXEC = os.path.join(ROOT, "build", "libmetal_ops_shim_exec.so")


@pytest.fixture(scope="module")
def model():
    if not os.path.exists(SHIM_EXEC):
        pytest.fail(f"{SHIM_EXEC} is missing: run `make metal-shim` (make test does)")
    lib = ctypes.CDLL(SHIM_EXEC, mode=ctypes.RTLD_GLOBAL)
    lib.metal_ops_model_misuse.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.metal_ops_model_misuse.restype = ctypes.c_int

    def misuse(what):
        out = ctypes.create_string_buffer(512)
        count = lib.metal_ops_model_misuse(what.encode(), out, len(out))
        return count, out.value.decode()

    return misuse


# broken use: words of the violation it must report
BROKEN = {
    "set_bytes_4096": "setBytes of 4096 bytes (smaller than 4 KiB)",
    "nested_sync": "dispatch_sync onto the stream's queue from inside it",
    "commit_outside_queue": "commit called outside its queue",
    "current_outside_queue": "currentCommandBuffer read outside the stream's queue",
    "offset_unaligned": "setBuffer offset 8",
    "offset_outside": "setBuffer offset 8192",
    "threadgroup_memory_unaligned": "setThreadgroupMemoryLength 24",
    "threads_over_pipeline": "2048 threads (the pipeline runs at most 1024)",
    "encoder_not_ended": "commit with a compute encoder not ended",
    "encode_after_end": "encoding after endEncoding",
    "error_before_completion": "error read before it completed",
    "wait_uncommitted": "waitUntilCompleted on a command buffer never committed",
    "commit_twice": "commit of a command buffer already committed",
    "write_past_end": "trunc_exp_forward_float32: wrote past the end of buffer 1",
    "read_past_end": "trunc_exp_forward_float32: read past the end of buffer 0",
    "mps_wait_after_continue": "waitUntilCompleted of an MPSCommandBuffer after commitAndContinue",
    "commit_and_wait_outside_queue": "the stream's commitAndWait called outside its queue",
    "dispatch_without_pipeline": "dispatch without a pipeline",
    "buffer_index_31": "buffer index 31 (at most 30)",
    "threadgroup_memory_over": "setThreadgroupMemoryLength 32784 at 0 (a multiple of 16 within 32 KiB)",
    "second_encoder": "a second compute encoder while one is open",
    "encode_after_commit": "encoding on a committed command buffer",
}


@pytest.mark.parametrize("use", sorted(BROKEN))
def test_each_broken_use_is_a_violation(model, use):
    count, text = model(use)
    assert count >= 1 and BROKEN[use] in text, (use, count, text)


@pytest.mark.parametrize("use", ["ok", "ok_sync", "ok_commit", "ok_mps_root", "ok_past_end"])
def test_the_correct_uses_are_not(model, use):
    assert model(use) == (0, ""), use


COPY = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
rng = np.random.default_rng(0)
x = tf.constant(np.linspace(-3, 3, 5000).astype(np.float32))
dy = rng.standard_normal(5000).astype(np.float32)
def call():
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = metal_ops.trunc_exp(x)
    return y, tape.gradient(y, x, output_gradients=tf.constant(dy))
call()  # the first calls are checked against the CPU kernel, whose results they keep
cost0, model0 = metal_path.host_cost(), _model.counters()
y, dx = call()
cost1, model1 = metal_path.host_cost(), _model.counters()
ok = np.allclose(y.numpy(), np.exp(x.numpy()), rtol=1e-6) and np.allclose(dx.numpy(), dy * np.exp(x.numpy()), rtol=1e-6)
print({k: cost1[k] - cost0[k] for k in cost0}, model1["violations"], metal_path.metal_fallbacks(), ok)
"""


def run_child(code, **env):
    full = dict(os.environ, CUDA_VISIBLE_DEVICES="", METAL_OPS_METAL="shim", METAL_OPS_SHIM_EXEC_LIB=SHIM_EXEC,
                TF_CPP_MIN_LOG_LEVEL="0")
    full.update(env)
    return subprocess.run([sys.executable, "-c", model_module.PRELUDE + code], env=full, capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def test_a_refused_no_copy_wrap_copies_in_and_back(model):
    """Metal may refuse newBufferWithBytesNoCopy for memory that is not from
    vm_allocate or mmap (TensorFlow's allocator uses posix_memalign): then
    every tensor is copied into a Metal buffer and the written ones copied
    back, with the same results, nothing wrapped and no fallback."""
    out = run_child(COPY, METAL_OPS_MODEL_FAULTS="no_copy")
    assert out.returncode == 0, out.stderr[-3000:]
    cost, violations, fallbacks, ok = out.stdout.strip().splitlines()[-1].rsplit(" ", 3)
    cost = eval(cost)
    n = 5000 * 4
    # forward: x in, y in and out; backward: dy, x, dx in, dx out
    assert cost["wrapped"] == 0 and cost["bytes_in"] == 5 * n and cost["bytes_out"] == 2 * n, cost
    assert (violations, fallbacks, ok) == ("0", "0", "True"), out.stdout


WIDTH = """
import numpy as np, metal_ops
from metal_ops import metal_path
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 16)).astype(np.float32)
ks = [rng.standard_normal((16, 64)).astype(np.float32) * 0.2, rng.standard_normal((64, 4)).astype(np.float32) * 0.2]
bs = [np.zeros(64, np.float32), np.zeros(4, np.float32)]
got = metal_ops.fused_mlp(x, ks, bs, activation="relu").numpy()
want = np.maximum(x @ ks[0] + bs[0], 0) @ ks[1] + bs[1]
print(float(np.max(np.abs(got - want))), metal_path.metal_runs()[0], metal_path.metal_fallbacks())
"""


def test_a_pipeline_narrower_than_32_lanes_sends_fused_mlp_to_the_cpu(model):
    """The simdgroup_matrix shaders assume 32-wide SIMD-groups: on the own
    queue a pipeline of another threadExecutionWidth is refused before
    anything is encoded, and the CPU computes, with one warning saying why."""
    out = run_child(WIDTH, METAL_OPS_MODEL_FAULTS="simd_width=16")
    assert out.returncode == 0, out.stderr[-3000:]
    err, plans, fallbacks = out.stdout.split()[-3:]
    assert float(err) < 1e-4 and plans == "0" and fallbacks == "1", out.stdout
    warnings = [line for line in out.stderr.splitlines() if "computes on the CPU instead" in line]
    assert len(warnings) == 1 and "threadExecutionWidth of 16" in warnings[0], warnings


CONTINUED = """
import numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
x = np.linspace(-3, 3, 5000).astype(np.float32)
got = metal_ops.trunc_exp(x).numpy()
print(float(np.max(np.abs(got - np.exp(x)) / np.exp(x))), metal_path.metal_runs()[0],
      _model.counters()["violations"])
"""


def test_the_stream_route_waits_on_the_root_command_buffer_after_commit_and_continue(model):
    """tensorflow-metal's command buffer is an MPSCommandBuffer; where MPSGraph
    committed it and continued on a new one, the host path waits for and reads
    the status of the rootCommandBuffer that carries the op's work (the
    METAL_OPS_GPU_SYNC=1 mode waits for every op)."""
    out = run_child(CONTINUED, METAL_OPS_METAL="shim-stream", METAL_OPS_GPU_SYNC="1",
                    METAL_OPS_MODEL_FAULTS="commit_and_continue")
    assert out.returncode == 0, out.stderr[-3000:]
    err, plans, violations = out.stdout.split()[-3:]
    assert float(err) < 1e-6 and plans == "1" and violations == "0", out.stdout + out.stderr[-2000:]


GATE = """
import os, numpy as np, metal_ops
from metal_ops import metal_path
x = np.linspace(-3, 3, 5000).astype(np.float32)
for fault in ["compile=trunc_exp", "no_metal3"]:
    os.environ["METAL_OPS_MODEL_FAULTS"] = fault
    counts = []
    for call, want in [(lambda: metal_ops.trunc_exp(x), np.exp(x)),
                       (lambda: metal_ops.robust_loss(x, 1.0, 1.0), np.sqrt(x * x + 1) - 1)]:
        before = metal_path.metal_runs()[0], metal_path.metal_fallbacks()
        err = float(np.max(np.abs(call().numpy() - want) / np.maximum(np.abs(want), 1)))
        counts += [metal_path.metal_runs()[0] - before[0], metal_path.metal_fallbacks() - before[1], err < 1e-5]
    print(fault, *counts)
print("violations", _model.counters()["violations"])
"""


def test_the_language_gate_and_one_librarys_compile_failure_leave_the_other_ops_on_metal(model):
    """Pipelines come through the library's pipeline cache and its language
    gate, which asks the device (supportsFamily:MTLGPUFamilyMetal3), not the
    OS version. On tensorflow-metal's stream route, a device without MSL 3.0
    sends RobustLoss (an MSL 3.0 library) to the CPU and keeps TruncExp on
    Metal; one library that fails to compile sends its op alone to the CPU;
    each with one warning naming the op and the reason."""
    out = run_child(GATE, METAL_OPS_METAL="shim-stream")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()[-3:]
    # fault, then for TruncExp and RobustLoss: plans run, fallbacks, result right
    assert lines == ["compile=trunc_exp 0 1 True 1 0 True", "no_metal3 1 0 True 0 1 True", "violations 0"], lines
    warnings = [line for line in out.stderr.splitlines() if "computes on the CPU instead" in line]
    assert len(warnings) == 2, warnings
    assert "MetalOpsTruncExp (node" in warnings[0] and "compiling the Metal shaders of 'trunc_exp' failed" in warnings[0]
    assert "MetalOpsRobustLoss (node" in warnings[1] and "MTLGPUFamilyMetal3" in warnings[1], warnings


NO_DEVICE = """
import numpy as np, metal_ops
from metal_ops import metal_path
x = np.linspace(-3, 3, 5000).astype(np.float32)
errs = [float(np.max(np.abs(metal_ops.trunc_exp(x).numpy() - np.exp(x)) / np.exp(x))) for _ in range(2)]
name, reason = metal_path.active_metal_path()
print(max(errs) < 1e-6, metal_path.metal_runs()[0], metal_path.metal_fallbacks(), name)
print(reason)
"""


@pytest.mark.parametrize("route", ["shim", "shim-stream"])
def test_no_metal_device_leaves_the_ops_on_the_cpu_with_one_message(model, route):
    """MTLCreateSystemDefaultDevice gives none in a virtual machine or a
    session without the GPU: the ops compute on the CPU (no error, no crash),
    the path says why, and one warning says it once however many calls."""
    out = run_child(NO_DEVICE, METAL_OPS_METAL=route, METAL_OPS_MODEL_FAULTS="nil_device")
    assert out.returncode == 0, out.stderr[-3000:]
    counts, reason = out.stdout.strip().splitlines()[-2:]
    assert counts == "True 0 0 cpu", out.stdout
    assert "no Metal device: MTLCreateSystemDefaultDevice" in reason, reason
    warnings = [line for line in out.stderr.splitlines() if "no Metal device" in line]
    assert len(warnings) == 1 and "the ops compute on the CPU" in warnings[0], warnings


LOW_PIPELINE = """
import os, numpy as np, tensorflow as tf, metal_ops
from metal_ops import metal_path
rng = np.random.default_rng(0)
xm = tf.constant(rng.standard_normal((256, 16)).astype(np.float32))
ks = [rng.standard_normal((16, 64)).astype(np.float32) * 0.2, rng.standard_normal((64, 4)).astype(np.float32) * 0.2]
bs = [np.zeros(64, np.float32), np.zeros(4, np.float32)]
x = np.linspace(-3, 3, 5000).astype(np.float32)
def mlp_grad():
    with tf.GradientTape() as tape:
        tape.watch(xm)
        y = metal_ops.fused_mlp(xm, ks, bs, activation="relu")
    return y.numpy(), tape.gradient(y, xm).numpy()
os.environ["METAL_OPS_METAL"] = "0"
want_mlp = mlp_grad()
low = "max_threads=16@fused_mlp_backward_w64_float32,max_threads=32@trunc_exp_forward_float32"
narrow = "max_threads=32@fused_mlp_forward_w64_float32,max_threads=64@fused_mlp_backward_w64_float32"
for route in ["shim", "shim-stream"]:
    os.environ["METAL_OPS_METAL"] = route
    for name, faults, call, want in [("mlp", low, mlp_grad, want_mlp),
                                     ("trunc_exp", low, lambda: [metal_ops.trunc_exp(x).numpy()], [np.exp(x)]),
                                     ("mlp-narrowed", narrow, mlp_grad, want_mlp)]:
        os.environ["METAL_OPS_MODEL_FAULTS"] = faults
        before = metal_path.metal_runs()[0], metal_path.metal_fallbacks()
        ok = all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(call(), want))
        print(route, name, metal_path.metal_runs()[0] - before[0], metal_path.metal_fallbacks() - before[1], ok)
print("violations", _model.counters()["violations"])
"""


def test_a_pipeline_running_fewer_threads_than_the_plan_asks_is_respected(model):
    """maxTotalThreadsPerThreadgroup is the pipeline's (a kernel using many
    registers gets less than the device's 1024). On both routes of the CPU
    kernels (the own queue and the stream): a 1-D grid's threadgroups narrow
    to the pipeline's limit; FusedMLP's row tiles narrow to fewer SIMD-groups
    (as tensorflow-metal's glue does), and where not even one SIMD-group fits
    the dispatch is refused before anything is encoded and the CPU computes
    that call, with one warning naming the kernel and the limit, while the
    op's other pipeline runs on Metal. The model reports any dispatch over a
    pipeline's limit; the own queue's first-use check compares the narrowed
    results with the CPU kernel's."""
    out = run_child(LOW_PIPELINE)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()[-7:]
    # route, op: plans run, fallbacks, result right (FusedMLP: forward on Metal, backward on the CPU)
    want = [f"{route} {case}" for route in ["shim", "shim-stream"]
            for case in ["mlp 1 1 True", "trunc_exp 1 0 True", "mlp-narrowed 2 0 True"]]
    assert lines == want + ["violations 0"], lines + [out.stderr[-2000:]]
    warnings = [line for line in out.stderr.splitlines() if "computes on the CPU instead" in line]
    assert len(warnings) == 1 and "MetalOpsFusedMLPGrad (node" in warnings[0], warnings
    assert "fused_mlp_backward_w64_float32: this GPU runs at most 16 threads per threadgroup" in warnings[0], warnings
    assert "differs from the CPU kernel's" not in out.stderr, out.stderr[-2000:]
