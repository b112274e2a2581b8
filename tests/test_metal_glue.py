"""The Metal backend's parts that run without a Mac.

- The glue's decisions (kernels/metal/metal_rules.h, through build/libmetal_shim.so):
  empty tensors are never bound as MTLBuffers, the shader language version a
  macOS offers and the error below it, threadgroup counts, whether a
  threadgroup dispatch fits, the blit fill rule, the METAL_OPS_GPU_SYNC mode
  (read at every op call) and its error; every pipeline and check before the
  first encode.
- The MPSGraph kernels' decisions (kernels/fused_conv2d/fused_conv2d.h): graph keys
  exact in every attribute, the bounded (least recently used) graph cache,
  ELU's expm1 from graph operations.
- The embedded shader sources (tools/build/embed_metal.py): every project include
  expanded, the C++ raw strings decode to exactly the expanded files, which are
  what the MSL-shim tests compile, and the language version lines.
- The MSL shim keeps real MSL's namespace: a shader that uses atomic_float
  without `metal::` fails to compile against it, as it would on a Mac.
"""
import ctypes
import glob
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from tests.metal_shim.shim import ROOT, load_shim, ptr

from tools.build import embed_metal
from tools.check import msl_check

pytestmark = pytest.mark.source_tree("the Objective-C++ glue and tools/check/metal_check.sh")

def _shader_path(name):
    """kernels/<folder>/<name>.metal: an op's shader in its folder, fill.metal in kernels/metal."""
    (path,) = glob.glob(os.path.join(ROOT, "kernels", "*", f"{name}.metal"))
    return path


METAL_SOURCES = sorted(glob.glob(os.path.join(ROOT, "kernels", "*", "*.metal")))


@pytest.fixture(scope="module")
def shim():
    lib = load_shim()
    lib.shim_tensor_has_metal_buffer.argtypes = [ctypes.c_int64]
    lib.shim_msl_version_for_device.argtypes = [ctypes.c_int]
    lib.shim_msl_at_least.argtypes = [ctypes.c_int] * 4
    lib.shim_mtl_language_version_value.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.shim_mtl_language_version_value.restype = ctypes.c_uint64
    lib.shim_threadgroup_count.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    lib.shim_threadgroup_count.restype = ctypes.c_uint64
    lib.shim_msl_too_old_message.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                                             ctypes.c_int]
    lib.shim_threadgroup_fit_error.argtypes = [ctypes.c_uint64] * 5 + [ctypes.c_char_p, ctypes.c_int]
    lib.shim_fill_length.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    lib.shim_fill_length.restype = ctypes.c_uint64
    lib.shim_gpu_sync_requested.argtypes = [ctypes.c_char_p]
    lib.shim_gpu_error_message.argtypes = [ctypes.c_char_p] * 5 + [ctypes.c_int]
    lib.shim_gpu_registration_refusal.argtypes = (
        [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        + [ctypes.POINTER(ctypes.c_char_p)] * 2 + [ctypes.POINTER(ctypes.c_int)] * 2 + [ctypes.c_char_p, ctypes.c_int])
    return lib


# ---- the glue's decisions ---------------------------------------------------------------

@pytest.mark.parametrize("count,bind", [(0, 0), (1, 1), (7, 1), (2**40, 1)])
def test_only_non_empty_tensors_are_bound_as_buffers(shim, count, bind):
    # A 0-element tensor's data is TF's static EmptyTensor byte, not an id<MTLBuffer>.
    assert shim.shim_tensor_has_metal_buffer(count) == bind


@pytest.mark.parametrize("is_buffer,length,bytes_,why", [
    (1, 64, 64, ""), (1, 4096, 60, ""),
    (0, 0, 64, "no MTLBuffer"), (1, 32, 64, "the buffer holds 32")])
def test_a_tensor_is_bound_only_through_a_metal_buffer_of_its_size(shim, is_buffer, length, bytes_, why):
    # Bridged tensor data that is no MTLBuffer (the adapter's BufferOfTensorData
    # gives nil for any other object) or a buffer shorter than the tensor fails
    # the op (KernelCall::BufferOf) before anything is encoded.
    shim.shim_tensor_buffer_error.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p,
                                              ctypes.c_int]
    out = ctypes.create_string_buffer(512)
    shim.shim_tensor_buffer_error(is_buffer, length, bytes_, out, len(out))
    text = out.value.decode()
    if not why:
        assert text == ""
    else:
        assert text.startswith(f"metal_ops: a tensor's data is not a Metal buffer of its {bytes_} bytes ({why};"), text


def test_bridged_tensor_data_is_checked_before_it_is_bound():
    code = _code(os.path.join(ROOT, "kernels", "metal", "metal_device.mm"))
    bridge = code.split("id<MTLBuffer> BufferOfTensorData(void* data)", 1)[1].split("\n}\n", 1)[0]
    assert "conformsToProtocol:@protocol(MTLBuffer)" in bridge and ": nil" in bridge, bridge
    glue = _code(GLUE_CC).split("mtl::Buffer* KernelCall::BufferOf(TF_Tensor* tensor)", 1)[1].split("\n}\n", 1)[0]
    assert glue.index("TensorBufferError(") < glue.index("buffers_.push_back"), glue


def test_the_adapter_waits_on_the_root_command_buffer():
    # MPSCommandBuffer.commandBuffer is the buffer it was made with; after
    # MPSGraph's commitAndContinue the work is on rootCommandBuffer, which the
    # host path asks for (Root) before it waits (the model's side:
    # test_metal_model_rules.py, commit_and_continue and mps_wait_after_continue).
    code = _code(os.path.join(ROOT, "kernels", "metal", "metal_device.mm"))
    root = code.split("std::unique_ptr<mtl::CommandBuffer> Root() override", 1)[1].split("\n  }\n", 1)[0]
    assert "isKindOfClass:[MPSCommandBuffer class]" in root and ").rootCommandBuffer" in root, root
    assert ".commandBuffer" not in code


@pytest.mark.parametrize("metal3,version", [(0, 204), (1, 300)])
def test_language_version_is_the_devices(shim, metal3, version):
    # From supportsFamily:MTLGPUFamilyMetal3, not the OS version (NSProcessInfo
    # reads 10.16 in a Python linked against an SDK older than 11).
    assert shim.shim_msl_version_for_device(metal3) == version


def test_the_gate_asks_the_device_not_the_os_version():
    code = _code(os.path.join(ROOT, "kernels", "metal", "metal_device.mm"))
    assert "NSProcessInfo" not in code and "operatingSystemVersion" not in code
    assert "supportsFamily:static_cast<MTLGPUFamily>(kMtlGpuFamilyMetal3)" in code


def test_language_version_order_and_raw_value(shim):
    assert shim.shim_msl_at_least(3, 0, 2, 4) == 1
    assert shim.shim_msl_at_least(2, 4, 3, 0) == 0
    assert shim.shim_msl_at_least(3, 0, 3, 0) == 1
    assert shim.shim_msl_at_least(3, 1, 3, 0) == 1
    assert shim.shim_msl_at_least(3, 0, 3, 1) == 0
    # Apple's MTLLanguageVersion values: 2.4 = 0x20004, 3.0 = 0x30000.
    assert shim.shim_mtl_language_version_value(2, 4) == 0x20004
    assert shim.shim_mtl_language_version_value(3, 0) == 0x30000


def test_too_old_message_names_library_and_versions(shim):
    out = ctypes.create_string_buffer(512)
    shim.shim_msl_too_old_message(b"hash_encode", 3, 0, out, 512)
    text = out.value.decode()
    assert "'hash_encode'" in text and "3.0" in text and "MTLGPUFamilyMetal3" in text and "macOS 13" in text
    assert "/CPU:0" in text


# The files that register Metal kernels (kernels/<op>/<op>_metal.cc), as the
# registration call's __FILE__ names them: relative to the root (the
# Makefile's) or absolute.
def _registering():
    paths = glob.glob(os.path.join(ROOT, "kernels", "*", "*_metal.cc"))
    return sorted(os.path.relpath(p, ROOT) for p in paths if re.search(r"mo::metal::Register\w*[<(]", _code(p)))


def _refusals(shim, embedded, metal3, apple7, turned_off=None):
    """GpuRegistrationRefusal of every registering file (as a relative and an
    absolute __FILE__) against the embedded libraries: {library: why}."""
    cc = (embedded / "metal_sources.cc").read_text()
    entries = [(m.group(1), m.group(2), int(m.group(3)), int(m.group(4))) for m in RAW.finditer(cc)]
    assert {"hash_encode", "fused_mlp", "trunc_exp"} <= {e[0] for e in entries}, entries
    strings = lambda values: (ctypes.c_char_p * len(values))(*[v.encode() for v in values])
    ints = lambda values: (ctypes.c_int * len(values))(*values)
    names, sources, majors, minors = zip(*entries)
    refused, registering = {}, _registering()
    assert len(registering) >= 11 and "kernels/fused_conv2d/fused_conv2d_metal.cc" in registering, registering
    for path in registering + [os.path.join(ROOT, p) for p in registering]:
        out = ctypes.create_string_buffer(1024)
        shim.shim_gpu_registration_refusal(
            path.encode(), metal3, apple7, None if turned_off is None else turned_off.encode(), len(entries),
            strings(names), strings(sources), ints(majors), ints(minors), out, len(out))
        if out.value:
            refused[os.path.basename(os.path.dirname(path))] = out.value.decode()
    return refused


@pytest.mark.parametrize("metal3,apple7", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_kernels_this_gpu_cannot_run_are_left_off_the_gpu_device(shim, embedded, metal3, apple7):
    """On tensorflow-metal, a kernel whose shader library needs a language or a
    GPU family the GPU does not offer is not registered for the GPU device, so
    TensorFlow places its op on the CPU: without MSL 3.0 those of hash_encode
    and robust_loss (atomic_float), without Apple7 those of fused_mlp
    (simdgroup_matrix); with both none."""
    refused = _refusals(shim, embedded, metal3, apple7)
    want = (set() if metal3 else {"hash_encode", "robust_loss"}) | (set() if apple7 else {"fused_mlp"})
    assert set(refused) == want, refused
    for library, why in refused.items():
        if library == "fused_mlp":
            assert why.startswith("the Metal kernels of 'fused_mlp' need simdgroup_matrix, which this GPU does not "
                                  "offer (it is not of MTLGPUFamilyApple7"), why
        else:
            assert why.startswith(f"the Metal kernels of '{library}' need Metal Shading Language 3.0, which this GPU "
                                  "does not offer"), why


def test_the_setting_leaves_named_libraries_off_the_gpu_device(shim, embedded):
    """METAL_OPS_TF_METAL_OFF: a Mac owner's way to put the ops of a library
    whose kernels fail at their call (a compile, a size) on the CPU."""
    refused = _refusals(shim, embedded, 1, 1, "trunc_exp,fused_conv2d")
    assert set(refused) == {"trunc_exp", "fused_conv2d"}, refused
    assert refused["trunc_exp"] == ("METAL_OPS_TF_METAL_OFF=trunc_exp,fused_conv2d leaves the kernels of "
                                    "'trunc_exp' off the GPU device")
    assert len(_refusals(shim, embedded, 1, 1, "all")) == len(_registering())
    assert _refusals(shim, embedded, 1, 1, "") == {} and _refusals(shim, embedded, 1, 1, "trunc,exp,") == {}


def test_a_kernel_this_gpu_cannot_run_names_the_setting_that_routes_it_to_the_cpu(shim):
    shim.shim_stream_refusal_message.argtypes = [ctypes.c_char_p] * 4 + [ctypes.c_int]
    out = ctypes.create_string_buffer(1024)
    shim.shim_stream_refusal_message(b"mlp/MetalOpsFusedMLP", b"fused_mlp", b"why", out, len(out))
    assert out.value.decode() == (
        "metal_ops: op 'mlp/MetalOpsFusedMLP' cannot run on this GPU: why. Set METAL_OPS_TF_METAL_OFF=fused_mlp to "
        "leave the kernels of 'fused_mlp' off tensorflow-metal's GPU device (TensorFlow then runs them on the CPU), "
        "or place the op with tf.device('/CPU:0')")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "kernels", "metal", "*.*")))
                         + sorted(glob.glob(os.path.join(ROOT, "kernels", "*", "*_metal.*"))), ids=os.path.basename)
def test_no_unimplemented_error_on_tensorflow_metals_device(path):
    """An op the library supports is never UNIMPLEMENTED on the GPU device: what
    the GPU's answers decide keeps the kernel off it (the CPU computes); what
    only the call finds goes through KernelCall::Refuse, naming the setting."""
    assert "TF_UNIMPLEMENTED" not in _code(path), os.path.relpath(path, ROOT)


def test_one_line_names_the_ops_left_to_the_cpu_and_why(shim):
    shim.shim_left_to_cpu_message.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    out = ctypes.create_string_buffer(1024)
    shim.shim_left_to_cpu_message(b"HashEncode|needs A;HashEncode|needs A;HashEncodeGrad|needs A;RobustLoss|needs B",
                                  out, len(out))
    assert out.value.decode() == ("metal_ops: ops not registered for tensorflow-metal's GPU (TensorFlow runs them on "
                                  "the CPU): HashEncode, HashEncodeGrad: needs A; RobustLoss: needs B")
    shim.shim_left_to_cpu_message(b"", out, len(out))
    assert out.value == b""


@pytest.mark.parametrize("threads,width,groups", [
    (0, 256, 1), (1, 256, 1), (256, 256, 1), (257, 256, 2), (1000, 32, 32),
    (2**40, 256, 2**20), (5, 0, 1)])
def test_threadgroup_count(shim, threads, width, groups):
    assert shim.shim_threadgroup_count(threads, width) == groups


def fit_error(shim, *args):
    out = ctypes.create_string_buffer(512)
    shim.shim_threadgroup_fit_error(*args, out, 512)
    return out.value.decode()


def test_threadgroup_fit(shim):
    # (max threads, threads, static bytes, bytes, device bytes); bytes round up to 16.
    assert fit_error(shim, 1024, 128, 0, 32768, 32768) == ""
    assert fit_error(shim, 1024, 128, 0, 32753, 32768) == ""
    assert "needs 32784" in fit_error(shim, 1024, 128, 0, 32769, 32768)
    assert "needs 32784" in fit_error(shim, 1024, 128, 16, 32768, 32768)
    assert "at most 64 threads" in fit_error(shim, 64, 128, 0, 0, 32768)
    assert "needs 0" in fit_error(shim, 64, 0, 0, 0, 32768)


@pytest.mark.parametrize("nbytes,buffer,length", [(4, 4, 4), (6, 8, 8), (2, 4, 4), (6, 6, 0), (4096, 4096, 4096),
                                                  (4097, 4098, 0)])
def test_fill_length_keeps_metals_fill_rule(shim, nbytes, buffer, length):
    # macOS: fillBuffer's range length (and offset, always 0) must be multiples of 4.
    got = shim.shim_fill_length(nbytes, buffer)
    assert got == length
    assert got % 4 == 0 and (got == 0 or nbytes <= got <= buffer)


@pytest.mark.parametrize("value,on", [(b"1", 1), (b"true", 1), (b"0", 0), (b"", 0), (None, 0), (b"yes please", 0)])
def test_gpu_sync_variable(shim, value, on):
    assert shim.shim_gpu_sync_requested(value) == on


def test_gpu_sync_follows_the_environment_at_every_call(shim, monkeypatch):
    # The glue reads the variable per op call: set or cleared after earlier
    # ops ran (a test module setting it once others have run), it applies from
    # the next op on.
    monkeypatch.delenv("METAL_OPS_GPU_SYNC", raising=False)
    assert shim.shim_gpu_sync_on() == 0
    monkeypatch.setenv("METAL_OPS_GPU_SYNC", "1")
    assert shim.shim_gpu_sync_on() == 1
    monkeypatch.setenv("METAL_OPS_GPU_SYNC", "0")
    assert shim.shim_gpu_sync_on() == 0
    monkeypatch.setenv("METAL_OPS_GPU_SYNC", "true")
    assert shim.shim_gpu_sync_on() == 1
    monkeypatch.delenv("METAL_OPS_GPU_SYNC")
    assert shim.shim_gpu_sync_on() == 0


def test_encode_decides_gpu_sync_per_call():
    # The host path's stream route (plans and MPSGraph's encode alike) takes
    # the mode from GpuSyncOn() at each encode and keeps no copy of it (a
    # function-local static would be read once per process).
    with open(os.path.join(ROOT, "kernels", "metal_plan", "host_path.cc"), encoding="utf-8") as f:
        text = f.read()
    assert len(re.findall(r"const bool sync = wait \|\| metal::GpuSyncOn\(\);", text)) == 1
    assert "kGpuSyncVariable" not in text and "getenv" not in text
    assert "getenv" not in _code(GLUE_CC) and "GpuSyncOn" not in _code(GLUE_CC)


@pytest.mark.parametrize("every,counted,calls", [(1, 0, 1), (2, 0, 2), (2, 1, 1), (5, 3, 2), (16, 0, 16)])
def test_a_waiting_op_commits_until_its_work_is_submitted(shim, every, counted, calls):
    """RayMarch and PackedVolumeRender wait for their command buffer outside the
    stream's queue: inside it they call tensorflow-metal's batching `commit`
    until the buffer holding their work is submitted (MPS_MAX_COMMIT_COUNT = 2
    by default), and only then leave the queue to wait."""
    made = ctypes.c_int()
    assert shim.shim_commit_until_submitted(every, counted, ctypes.byref(made)) == 1
    assert made.value == calls


def test_a_stream_that_never_submits_falls_back_to_commit_and_wait(shim):
    made = ctypes.c_int()
    assert shim.shim_commit_until_submitted(0, 0, ctypes.byref(made)) == 0
    assert made.value == 16
    host_path = _code(os.path.join(ROOT, "kernels", "metal_plan", "host_path.cc"))
    encode = host_path.split("Result EncodeOnStream(", 1)[1].split("\n}\n", 1)[0]
    queue_block = encode.split("stream.Sync([&] {", 1)[1].split("\n  });\n", 1)[0]
    # Inside the queue: submit (or, failing that, commitAndWait); the wait for a submitted buffer comes after it.
    assert "CommitUntilSubmitted(" in queue_block and "WaitUntilCompleted" not in queue_block
    assert queue_block.index("CommitUntilSubmitted(") < queue_block.index("stream.CommitAndWait()")
    assert "submitted->WaitUntilCompleted()" in encode.split("stream.Sync([&] {", 1)[1].split("\n  });\n", 1)[1]


def test_gpu_error_message_names_op_and_kernels(shim):
    out = ctypes.create_string_buffer(1024)
    shim.shim_gpu_error_message(b"model/hash_encode/MetalOpsHashEncode", b"hash_encode_zero_u32;blit fill",
                                b"error", b"Internal Error (0000000e)", out, 1024)
    text = out.value.decode()
    for part in ("'model/hash_encode/MetalOpsHashEncode'", "hash_encode_zero_u32, blit fill", "status error",
                 "Internal Error (0000000e)", "METAL_OPS_GPU_SYNC=1"):
        assert part in text, (part, text)


def encode_bodies(text):
    """The bodies of the `call.EncodeOnStream(what, [&](mo::mtl::CommandBuffer& ...) { ... })` lambdas of a file."""
    bodies = []
    for match in re.finditer(r"call\.EncodeOnStream\([^;{]*\[&\]\(mo::mtl::CommandBuffer& \w+\) \{", text):
        depth, at = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[at], 0)
            at += 1
        bodies.append(text[match.end():at])
    return bodies


def test_every_pipeline_and_check_comes_before_the_first_encode():
    """Pipelines are compiled (and the threadgroup and GPU-family checks made)
    before an op enters the stream's queue, so a failing call encodes nothing
    and no compile runs inside dispatch_sync(stream.queue)."""
    found = 0
    for path in OP_GLUE_FILES + [GLUE_CC]:
        text = open(path).read()
        # call.RunPlan(plan, ...) encodes through KernelCall::RunPlan (checked below).
        found += text.count("call.RunPlan(")
        for body in encode_bodies(text):
            found += 1
            for banned in ("Pipeline(", "CheckThreadgroups(", "GetLimits(", "CompileGraph(", "call_once"):
                assert banned not in body, (os.path.basename(path), banned)
    assert found >= 15
    # RunPlan runs the host path's RunOnStream, which takes every pipeline
    # (compiles, GPU-family and threadgroup checks) before it enters the queue.
    run_plan = open(GLUE_CC).read().split("void KernelCall::RunPlan(", 1)[1].split("\n}\n", 1)[0]
    assert "metal_plan::RunOnStream(" in run_plan
    host_path = open(os.path.join(ROOT, "kernels", "metal_plan", "host_path.cc")).read()
    on_stream = host_path.split("Result RunOnStream(", 1)[1]
    assert 0 < on_stream.index("Pipelines(") < on_stream.index("stream.Sync(")


# ---- the MPSGraph kernels (fused_conv2d_metal.cc): graph keys, the cache, ELU ------------

def _text(fn, *args, size=1024):
    out = ctypes.create_string_buffer(size)
    fn(*args, out, size)
    return out.value.decode()


def float_key(shim, value):
    shim.shim_float_key.argtypes = [ctypes.c_float, ctypes.c_char_p, ctypes.c_int]
    return _text(shim.shim_float_key, value)


def graph_key(shim, op, device, attrs, shapes, output=()):
    shim.shim_graph_key.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                                    ctypes.c_int]
    ranks = np.array([len(s) for s in shapes] or [0], np.int32)
    dims = np.array([d for s in shapes for d in s] or [0], np.int64)
    out = np.array(list(output) or [0], np.int64)
    return _text(shim.shim_graph_key, op.encode(), device, ";".join(attrs).encode(), ptr(ranks), ptr(dims),
                 len(shapes), ptr(out), len(output))


def test_graph_key_tells_output_shapes_apart():
    # The convolution with no taps (zero input channels, or an empty input)
    # takes only the bias [C] and bakes the output shape into a constant: two
    # such calls with one bias and different N/H/W must not share a graph.
    shim = load_shim()
    attrs = ["1", "1"]
    a = graph_key(shim, "conv_no_taps", 1, attrs, [[8]], [2, 4, 4, 8])
    b = graph_key(shim, "conv_no_taps", 1, attrs, [[8]], [3, 5, 5, 8])
    assert a != b
    assert graph_key(shim, "conv_no_taps", 1, attrs, [[8]], [2, 4, 4, 8]) == a
    # RunGraph keys every graph by its output shape too.
    with open(os.path.join(ROOT, "kernels", "fused_conv2d", "fused_conv2d_metal.cc"), encoding="utf-8") as f:
        assert re.search(r"GraphKey\(op, [^;]*attrs, request\.input_shapes,\s*request\.output_shape\)", f.read())


CONV_FIELDS = [0, 1, 1, 1, 1, 0, 0, 0, 0, 4, 1, 1]  # SAME, unit strides and dilations, leaky_relu, bias + residual


def conv_attrs(shim, fields, alpha):
    shim.shim_conv_graph_attrs.argtypes = [ctypes.c_void_p, ctypes.c_float, ctypes.c_char_p, ctypes.c_int]
    f = np.array(fields, np.int64)
    return _text(shim.shim_conv_graph_attrs, ptr(f), alpha)


def next_float32(x):
    return float(np.nextafter(np.float32(x), np.float32(np.inf)))


@pytest.mark.parametrize("alpha", [0.1, 0.2, 1e-7, 3.3333333, -0.25, 1e30])
def test_alpha_key_is_exact(shim, alpha):
    # std::to_string prints 6 decimals: neighbouring floats (and all |alpha| < 5e-7) printed alike.
    a, b = np.float32(alpha), np.float32(next_float32(alpha))
    assert f"{float(a):f}" == f"{float(b):f}" or abs(alpha) >= 1e3
    assert float_key(shim, float(a)) != float_key(shim, float(b))
    assert float_key(shim, float(a)) == float_key(shim, float(np.float32(alpha)))
    assert conv_attrs(shim, CONV_FIELDS, float(a)) != conv_attrs(shim, CONV_FIELDS, float(b))
    shim.shim_activation_grad_graph_attrs.argtypes = [ctypes.c_int, ctypes.c_float, ctypes.c_int64, ctypes.c_char_p,
                                                      ctypes.c_int]
    grad = [_text(shim.shim_activation_grad_graph_attrs, 4, float(v), 0) for v in (a, b)]
    assert grad[0] != grad[1]


def test_every_conv_attribute_changes_the_key(shim):
    base = conv_attrs(shim, CONV_FIELDS, 0.2)
    assert base == conv_attrs(shim, list(CONV_FIELDS), 0.2)
    for i in range(len(CONV_FIELDS)):
        changed = list(CONV_FIELDS)
        changed[i] = 2 if changed[i] != 2 else 1
        assert conv_attrs(shim, changed, 0.2) != base, i


def test_activation_grad_attributes_change_the_key(shim):
    shim.shim_activation_grad_graph_attrs.argtypes = [ctypes.c_int, ctypes.c_float, ctypes.c_int64, ctypes.c_char_p,
                                                      ctypes.c_int]
    keys = {_text(shim.shim_activation_grad_graph_attrs, act, alpha, nf)
            for act, alpha, nf in [(4, 0.2, 0), (4, 0.2, 1), (3, 0.2, 0), (4, 0.3, 0)]}
    assert len(keys) == 4


@pytest.mark.parametrize("a,b", [
    (("conv", 1, ["1", "23"], [[2, 3]]), ("conv", 1, ["12", "3"], [[2, 3]])),        # attribute pieces
    (("conv", 1, ["1"], [[1, 23]]), ("conv", 1, ["1"], [[12, 3]])),                  # dimensions
    (("conv", 1, ["1"], [[1], [2]]), ("conv", 1, ["1"], [[1, 2]])),                  # shapes
    (("conv", 1, ["1"], [[]]), ("conv", 1, ["1"], [])),                               # a scalar input
    (("conv", 1, ["1"], [[4, 4]]), ("conv", 2, ["1"], [[4, 4]])),                    # the GPU
    (("conv", 1, ["1"], [[4, 4]]), ("conv_no_taps", 1, ["1"], [[4, 4]])),            # the graph kind
])
def test_graph_keys_are_unambiguous(shim, a, b):
    assert graph_key(shim, *a) != graph_key(shim, *b)
    assert graph_key(shim, *a) == graph_key(shim, *a)


@pytest.fixture
def lru(shim):
    shim.shim_lru_new.restype = ctypes.c_void_p
    shim.shim_lru_new.argtypes = [ctypes.c_uint64]
    for name in ("shim_lru_delete", "shim_lru_size", "shim_lru_contains", "shim_lru_get"):
        getattr(shim, name).argtypes = [ctypes.c_void_p] + ([ctypes.c_char_p] if name in (
            "shim_lru_contains", "shim_lru_get") else [])
    shim.shim_lru_size.restype = ctypes.c_uint64
    made = []

    def new(capacity):
        made.append(shim.shim_lru_new(capacity))
        return made[-1]
    yield new
    for handle in made:
        shim.shim_lru_delete(handle)


def test_graph_cache_keeps_at_most_capacity_and_drops_the_least_recently_used(shim, lru):
    cache = lru(3)
    assert [shim.shim_lru_get(cache, k) for k in (b"a", b"b", b"c")] == [1, 1, 1]
    assert shim.shim_lru_get(cache, b"a") == 0       # found: it becomes the most recently used
    assert shim.shim_lru_get(cache, b"d") == 1       # drops b, the least recently used
    assert shim.shim_lru_size(cache) == 3
    assert [shim.shim_lru_contains(cache, k) for k in (b"a", b"b", b"c", b"d")] == [1, 0, 1, 1]
    assert shim.shim_lru_get(cache, b"b") == 1       # made again (compiled again); drops c
    assert [shim.shim_lru_contains(cache, k) for k in (b"a", b"b", b"c", b"d")] == [1, 1, 0, 1]


def test_graph_cache_stays_bounded_under_ever_new_shapes(shim, lru):
    capacity = shim.shim_graph_cache_capacity()
    assert 64 <= capacity <= 4096
    cache = lru(capacity)
    for i in range(3 * capacity):
        assert shim.shim_lru_get(cache, f"conv|1|x|{i},8,8,3,".encode()) == 1
        assert shim.shim_lru_size(cache) == min(i + 1, capacity)
    # A working set within the bound is never recompiled.
    hot = [f"hot{i}".encode() for i in range(capacity)]
    for k in hot:
        shim.shim_lru_get(cache, k)
    assert all(shim.shim_lru_get(cache, k) == 0 for _ in range(2) for k in hot)


def test_dropped_graph_stays_valid_for_its_holder(shim):
    assert shim.shim_lru_dropped_value_stays_valid() == 1


def _run_formula(shim, name, z):
    z = np.ascontiguousarray(z, np.float32)
    out = np.full_like(z, np.nan)
    getattr(shim, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    getattr(shim, name)(ptr(z), ptr(out), z.size)
    return out


def ulp_error(got, want):
    want32 = np.abs(want).astype(np.float32)
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.maximum(want32, np.float32(1e-45))).astype(np.float64)


ELU_Z = np.concatenate([np.linspace(-30, 3, 100001), -np.logspace(-45, 1.5, 10001), np.logspace(-45, 1.5, 10001),
                        [0.0, -0.0, -0.34657359, -0.3465736, 0.34657359, 0.3465736]]).astype(np.float32)


def test_mpsgraph_expm1_is_accurate_to_2_ulp(shim):
    # exp(z) - 1 in float32 is wrong by up to millions of ulp (every digit for |z| < 2^-24).
    got = _run_formula(shim, "shim_mpsgraph_expm1", ELU_Z)
    err = ulp_error(got, np.expm1(ELU_Z.astype(np.float64)))
    assert err.max() <= 2.0, (err.max(), ELU_Z[np.argmax(err)])


def test_mpsgraph_elu_matches_activations_h(shim):
    got = _run_formula(shim, "shim_mpsgraph_elu", ELU_Z)
    z = ELU_Z.astype(np.float64)
    want = np.where(z > 0, z, np.expm1(z))
    assert ulp_error(got, want).max() <= 2.0
    tiny = np.array([-1e-30, -1e-8, -2.0**-20], np.float32)  # expm1(z) rounds to z; exp(z) - 1 gives 0 or -2^-24 steps
    np.testing.assert_array_equal(_run_formula(shim, "shim_mpsgraph_elu", tiny),
                                  np.expm1(tiny.astype(np.float64)).astype(np.float32))
    special = _run_formula(shim, "shim_mpsgraph_elu", np.array([np.inf, -np.inf, np.nan, -200.0], np.float32))
    assert special[0] == np.inf and special[1] == -1.0 and np.isnan(special[2]) and special[3] == -1.0


def test_mpsgraph_elu_is_built_from_the_shared_formula():
    with open(os.path.join(ROOT, "kernels", "fused_conv2d", "fused_conv2d_metal.mm"), encoding="utf-8") as f:
        graph = f.read()
    elu = re.search(r"case kActElu: \{(.*?)\n    \}", graph, re.DOTALL)
    assert elu and "Elu(ops, z)" in elu.group(1) and "exponentWithTensor" not in elu.group(1)
    with open(os.path.join(ROOT, "kernels", "fused_conv2d", "fused_conv2d_metal.cc"), encoding="utf-8") as f:
        glue = f.read()
    for text in (graph, glue):
        assert "std::to_string(a.alpha)" not in text and "std::to_string(alpha)" not in text
    assert "LruCache<CachedGraph>" in glue and "unordered_map" not in glue


# ---- embedded sources -------------------------------------------------------------------

RAW = re.compile(r'\{"([a-z0-9_]+)", R"mo_msl\((.*?)\)mo_msl", (\d+), (\d+)\}', re.DOTALL)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen")
    assert embed_metal.main(["--root", ROOT, "--out", str(out)] + METAL_SOURCES) == 0
    return out


def test_every_shader_is_embedded_and_decodes_to_its_expansion(embedded):
    cc = (embedded / "metal_sources.cc").read_text()
    entries = {m.group(1): (m.group(2), int(m.group(3)), int(m.group(4))) for m in RAW.finditer(cc)}
    names = [os.path.splitext(os.path.basename(p))[0] for p in METAL_SOURCES]
    assert sorted(entries) == sorted(names)
    assert f"kNumEmbeddedMetalSources = {len(names)};" in cc
    for name in names:
        text, major, minor = entries[name]
        assert text == (embedded / f"{name}.metal").read_text()
        # Self-contained: no project include left, the system one kept.
        assert not re.search(r'^\s*#\s*include\s+"', text, re.MULTILINE), name
        assert "#include <metal_stdlib>" in text
        # Every entry point of the original file is in the expansion.
        original = open(_shader_path(name)).read()
        for kernel in re.findall(r"kernel void (\w+)\(", original):
            assert f"kernel void {kernel}(" in text, (name, kernel)
        assert msl_check.instantiations(text) == msl_check.instantiations(original), name
        uses_atomic_float = "atomic_float" in text
        assert (major, minor) == ((3, 0) if uses_atomic_float else (2, 4)), name


def test_the_shim_compiles_the_embedded_expansion(embedded):
    """build/gen (what `make` embedded and the shim library was built from) is current."""
    gen = os.path.join(ROOT, "build", "gen")
    if not os.path.isdir(gen):
        pytest.fail("build/gen is missing: run `make metal-shim` (make test does)")
    for path in METAL_SOURCES:
        name = os.path.basename(path)
        assert open(os.path.join(gen, name)).read() == (embedded / name).read_text(), name
    for shim_cc in glob.glob(os.path.join(ROOT, "tests", "metal_shim", "*_shim.cc")):
        text = open(shim_cc).read()
        assert not re.search(r'#include "kernels/\w+/\w+\.metal"', text), (
            f"{shim_cc} must include the expanded source (\"<name>.metal\"), not the tree's shader")


def test_the_first_call_compile_table_counts_each_library():
    """docs/METAL_COMPAT.md's table of what a first call compiles: each
    library's kernel instantiations (as the model registers them) and lines."""
    gen = os.path.join(ROOT, "build", "gen")
    if not os.path.isdir(gen):
        pytest.fail("build/gen is missing: run `make metal-shim` (make test does)")
    doc = open(os.path.join(ROOT, "docs", "METAL_COMPAT.md")).read().split("## The first call's compile", 1)[1]
    table = dict((m[0], (int(m[1]), int(m[2].replace(",", ""))))
                 for m in re.findall(r"^\| (\w+) \| (\d+) \| ([\d,]+) \|$", doc.split("\n## ", 1)[0], re.MULTILINE))
    found = {}
    for path in glob.glob(os.path.join(gen, "*_exec.cc")):
        name = os.path.basename(path)[:-len("_exec.cc")]
        kernels = len(re.findall(r'^  \{"' + name + '", ', open(path).read(), re.MULTILINE))
        found[name] = (kernels, len(open(os.path.join(gen, name + ".metal")).read().splitlines()))
    assert table == found


# The shaders whose entry points are kernel templates, instantiated by host name:
# every shader with an instantiation line, so a new one is checked without a list to edit.
TEMPLATED_SHADERS = [os.path.basename(path)[:-len(".metal")] for path in METAL_SOURCES
                     if msl_check.instantiations(open(path).read())]


def test_the_templated_shaders_are_found():
    """The instantiation lines are read (a parse that found none would check nothing)."""
    assert {"sh_encode", "hash_encode", "fused_mlp"} <= set(TEMPLATED_SHADERS)


@pytest.mark.parametrize("shader", TEMPLATED_SHADERS)
def test_the_shim_finds_every_instantiation_by_the_hosts_names(shader):
    """Every name the op's .mm can ask Metal for is instantiated, and every
    instantiation is one of those names (the shim looks them up as the .mm does)."""
    lib = load_shim()
    find_every = getattr(lib, f"shim_{shader}_find_every_kernel")
    find_every.restype = ctypes.c_int
    assert find_every() == 0
    original = open(_shader_path(shader)).read()
    assert msl_check.instantiations(original), shader


def test_instantiations_are_read_and_mismatches_refused():
    line = 'template [[host_name("{name}")]] [[kernel]] decltype(f<{a}, float>) f<{b}, float>;\n'
    assert msl_check.instantiations(line.format(name="f_1", a=1, b=1)) == [("f_1", "f<1, float>")]
    with pytest.raises(ValueError, match="declares"):
        msl_check.instantiations(line.format(name="f_1", a=1, b=2))
    with pytest.raises(ValueError, match="twice"):
        msl_check.instantiations(line.format(name="f_1", a=1, b=1) + line.format(name="f_1", a=2, b=2))


def test_embed_reports_missing_include_and_cycles(tmp_path):
    root = tmp_path
    (root / "kernels").mkdir()
    (root / "kernels" / "a.h").write_text('#include "kernels/b.h"\n')
    (root / "kernels" / "b.h").write_text('#include "kernels/a.h"\n')
    (root / "cycle.metal").write_text('#include "kernels/a.h"\n')
    (root / "missing.metal").write_text('#include "kernels/nope.h"\n')
    with pytest.raises(embed_metal.EmbedError, match="include cycle"):
        embed_metal.embed([str(root / "cycle.metal")], str(root), str(root / "out"))
    with pytest.raises(embed_metal.EmbedError, match=r"missing.metal:1: .*kernels/nope.h"):
        embed_metal.embed([str(root / "missing.metal")], str(root), str(root / "out"))


KERNEL_ROW = re.compile(r'^    \{"([a-z0-9_]+)", "(\w+)", (\d+), (\d+)\},$', re.MULTILINE)


def test_every_instantiation_is_listed_where_it_lies_in_its_source(embedded):
    """kEmbeddedMetalKernels: each instantiation of each source once, its
    bytes in the embedded text being that declaration (the pipeline cache
    compiles the source with the others cut out)."""
    cc = (embedded / "metal_sources.cc").read_text()
    rows = KERNEL_ROW.findall(cc.split("kEmbeddedMetalKernels[] = {", 1)[1])
    assert f"kNumEmbeddedMetalKernels = {len(rows)};" in cc
    listed = {}
    for library, host, begin, end in rows:
        data = (embedded / f"{library}.metal").read_text().encode("utf-8")
        declaration = data[int(begin):int(end)].decode("utf-8")
        assert msl_check.instantiations(declaration) == [(host, msl_check.instantiations(declaration)[0][1])]
        assert declaration.startswith("template") and declaration.endswith(";"), (library, host)
        listed.setdefault(library, []).append(host)
    for path in METAL_SOURCES:
        name = os.path.splitext(os.path.basename(path))[0]
        text = (embedded / f"{name}.metal").read_text()
        assert listed.get(name, []) == [host for host, _ in msl_check.instantiations(text)], name


def test_embed_refuses_an_instantiation_it_cannot_split(tmp_path, capsys):
    """A host name outside an instantiation of the one form the build reads
    fails the build step, naming the library and the line: never a source
    compiled whole without a word."""
    (tmp_path / "split_me.metal").write_text(
        "template <typename T> [[kernel]] void f(device T* x [[buffer(0)]]) {}\n"
        'template [[host_name("f_float")]] [[kernel]] void f<float>(device float* x [[buffer(0)]]);\n')
    assert embed_metal.main(["--root", str(tmp_path), "--out", str(tmp_path / "out"),
                             str(tmp_path / "split_me.metal")]) == 1
    assert "embed_metal: split_me: line 2: a host name outside an instantiation" in capsys.readouterr().err


def test_embed_reads_the_language_line(tmp_path):
    (tmp_path / "new.metal").write_text("// metal_ops: msl 3.1\nkernel void f() {}\n")
    (tmp_path / "old.metal").write_text("kernel void g() {}\n")
    entries = embed_metal.embed([str(tmp_path / "new.metal"), str(tmp_path / "old.metal")], str(tmp_path),
                                str(tmp_path / "out"))
    assert {name: (major, minor) for name, _, major, minor in entries} == {"new": (3, 1), "old": (2, 4)}


# ---- the shim keeps MSL's namespace -----------------------------------------------------

SHADER = """
#include "tests/metal_shim/msl_shim.h"
{prelude}
kernel void add(device {atomic}* sums [[buffer(0)]], uint gid [[thread_position_in_grid]]) {{
  {fetch_add}(&sums[0], 1.0f, {order});
}}
"""


def compile_shader(tmp_path, **parts):
    source = tmp_path / "shader.cc"
    source.write_text(SHADER.format(**parts))
    cxx = os.environ.get("CXX", "g++").split()[0]
    if shutil.which(cxx) is None:
        pytest.skip(f"no C++ compiler ({cxx})")
    return subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-Wno-attributes", "-I", ROOT, str(source)],
                          capture_output=True, text=True)


def test_shim_rejects_unqualified_atomics(tmp_path):
    result = compile_shader(tmp_path, prelude="", atomic="atomic_float",
                            fetch_add="atomic_fetch_add_explicit", order="memory_order_relaxed")
    assert result.returncode != 0
    assert "atomic_float" in result.stderr


@pytest.mark.parametrize("prelude,prefix", [("", "metal::"), ("using namespace metal;", "")])
def test_shim_accepts_qualified_atomics(tmp_path, prelude, prefix):
    result = compile_shader(tmp_path, prelude=prelude, atomic=prefix + "atomic_float",
                            fetch_add=prefix + "atomic_fetch_add_explicit", order=prefix + "memory_order_relaxed")
    assert result.returncode == 0, result.stderr


def test_metal_check_without_sdk_prints_one_line_and_passes(tmp_path):
    result = subprocess.run(["bash", os.path.join(ROOT, "tools", "check", "metal_check.sh")], capture_output=True, text=True,
                            env={**os.environ, "MACOS_SDK": str(tmp_path / "no-sdk")}, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("metal-check: skipped: no macOS SDK at MACOS_SDK="), lines


# ---- the op files go through the shared glue --------------------------------------------

def _code(path):
    """The file without // comments (the rules are about code, not prose)."""
    return _code_of_text(open(path, encoding="utf-8").read())


def _code_of_text(text):
    return "\n".join(line.split("//")[0] for line in text.splitlines())


GLUE_CC = os.path.join(ROOT, "kernels", "metal", "metal_kernel.cc")
OP_GLUE_FILES = sorted(glob.glob(os.path.join(ROOT, "kernels", "*", "*_metal.cc")))


@pytest.mark.parametrize("path", OP_GLUE_FILES, ids=os.path.basename)
def test_op_glue_never_touches_stream_or_tensor_data_itself(path):
    # The stream's command buffer is read, and work encoded, only inside the
    # glue's queue block; an empty tensor's data is never bridged to a buffer.
    code = _code(path)
    for name in ("currentCommandBuffer", "dispatch_sync", "TF_GetStream", "TF_TensorData", "TF_DeleteTensor",
                 "TF_OpKernelContext_Failure"):
        assert name not in code, f"{os.path.basename(path)} uses {name}: go through kernels/metal/metal_kernel.h"


@pytest.mark.parametrize("path", OP_GLUE_FILES, ids=os.path.basename)
def test_every_metal_compute_goes_through_the_shared_call(path):
    # RegisterKernel(...), RegisterStateless(...) or RegisterWithAttrs<Attrs, ...>(...).
    registrations = re.findall(r"Register(?:Kernel|Stateless|WithAttrs<[^;]*?>)\((.*?)\);", _code(path), re.DOTALL)
    assert registrations, f"{os.path.basename(path)} registers no kernel"
    for call in registrations:
        assert re.search(r"&mo::metal::Compute<\w+>|&Compute<\w+>", call), (
            f"{os.path.basename(path)}: register the compute function as mo::metal::Compute<F> "
            f"(status, cleanup): {' '.join(call.split())}")


def test_fused_mlp_checks_the_gpu_family_before_compiling_its_library():
    # A GPU without simdgroup_matrix gets FusedMLP's refusal, not
    # a compile error of its shader library: the family check comes first.
    text = _code(os.path.join(ROOT, "kernels", "fused_mlp", "fused_mlp_metal.cc"))
    for kind in ("void Forward(", "void Backward("):
        body = text.split(kind, 1)[1].split("\n}\n", 1)[0]
        assert "GpuFamilyOk(call)" in body, kind
        assert body.index("GpuFamilyOk(call)") < body.index("call.Pipeline("), kind
    assert "GetLimits().apple7" in text.split("bool GpuFamilyOk(", 1)[1].split("\n}\n", 1)[0]


# ---- the Objective-C++ is an adapter --------------------------------------------------

# MPSGraph's graph building (FusedConv2D's graphs) is counted apart: its
# file up to the line that starts the encoding (an adapter like the others).
GRAPH_BUILDING = {"kernels/fused_conv2d/fused_conv2d_metal.mm":
                  "// ---- a compiled graph encoded on tensorflow-metal's command buffer"}
MM_LINE_BUDGET = 400
# Every Objective-C++ file but the graph building: an adapter of Metal calls.
ADAPTERS = ["kernels/metal/metal_device.mm"]
ADAPTER_METHOD_LINES = 20


def test_the_objective_c_outside_graph_building_fits_its_budget():
    """Every decision of the Metal host path is C++ (run here against the strict
    model); the .mm files outside MPSGraph's graph building are an adapter of
    single Metal calls, at most 400 lines in all."""
    mm = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "kernels", "*", "*.mm")))
    assert set(GRAPH_BUILDING) | set(ADAPTERS) == set(mm), mm
    lines = {}
    for p in mm:
        text = open(os.path.join(ROOT, p), encoding="utf-8").read()
        if p in GRAPH_BUILDING:
            assert GRAPH_BUILDING[p] in text, (p, GRAPH_BUILDING[p])
            text = text.split(GRAPH_BUILDING[p], 1)[1]
        lines[p] = len(text.splitlines())
    assert sum(lines.values()) <= MM_LINE_BUDGET, lines
    # The kernel C API is the C++ glue's: no .mm registers a kernel or reads a tensor.
    for p in mm:
        code = _code(os.path.join(ROOT, p))
        for name in ("TF_NewKernelBuilder", "TF_GetInput", "TF_AllocateOutput", "TF_OpKernelConstruction_GetAttr"):
            assert name not in code, (p, name)


_NOT_A_FUNCTION = re.compile(r"^(else|if|for|while|switch|do|@autoreleasepool|@try|@catch|namespace|class|struct|"
                             r"extern)\b")


def _function_bodies(code):
    """(signature, lines) of each function or method defined in `code` (C++ or
    Objective-C++ without comments); lambdas and blocks count in theirs."""
    found, blocks, start = [], [], 0  # blocks: per open brace, (offset, signature) of a function's, else None
    for i, ch in enumerate(code):
        inside = any(blocks)
        if ch == "{":
            header = " ".join(re.sub(r"^\s*template\s*<[^{;]*?>", "", code[start:i]).split())
            header = re.sub(r"^(public|private|protected):\s*", "", header)
            function = (not inside and re.search(r"\)\s*(const\s*)?(override\s*)?(:\s*\w+\(\w*\)\s*)?$", header)
                        and not _NOT_A_FUNCTION.match(header))
            blocks.append((i, header) if function else None)
        elif ch == "}":
            opened = blocks.pop()
            if opened:
                found.append((opened[1], code.count("\n", opened[0], i) + 1))
        if ch in ";{}" and not any(blocks):
            start = i + 1
    return found


def test_the_function_reader_finds_every_kind_of_definition():
    code = _code_of_text("""
template <typename T>
std::unique_ptr<T> Wrap(T object) {
  return nullptr;
}
class A : public B {
 public:
  explicit A(int x) : x_(x) {}
  void Run(const std::function<void()>& body) override {
    dispatch_sync(q, ^() {
      body();
    });
  }
  int X() const override { return x_; }
};
id<MTLLibrary> Compile(id<MTLDevice> device,
                       std::string* error) {
  if (device == nil) {
    return nil;
  }
  return nil;
}""")
    assert [(name.split("(")[0].split()[-1], n) for name, n in _function_bodies(code)] == [
        ("Wrap", 3), ("A", 1), ("Run", 5), ("X", 1), ("Compile", 6)]


@pytest.mark.parametrize("path", ADAPTERS)
def test_each_adapter_method_is_one_metal_call_or_a_direct_sequence(path):
    """The adapter decides nothing: no loop, no switch; each function or method
    is one Metal call or a short direct sequence of them (at most 20 lines)."""
    code = _code(os.path.join(ROOT, path))
    assert not re.search(r"\b(for|while|switch)\s*\(", code), path
    bodies = _function_bodies(code)
    assert len(bodies) >= 30, bodies  # the reader found the adapter's methods
    long = [(name, n) for name, n in bodies if n > ADAPTER_METHOD_LINES]
    assert not long, long


def _tf_include():
    """TensorFlow's include folder, as `make` found it (build/tf_flags.mk)."""
    path = os.path.join(ROOT, "build", "tf_flags.mk")
    if not os.path.exists(path):
        return None
    flags = re.search(r"^TF_CFLAGS := (.*)$", open(path).read(), re.MULTILINE)
    found = [f[2:] for f in (flags.group(1).split() if flags else []) if f.startswith("-I")]
    return found[0] if found else None


def test_the_cpp_metal_glue_compiles_here():
    """The C++ Metal glue joins the macOS build only (its kernels register for
    TensorFlow's "GPU"), but it is plain C++ on the kernel C API and the
    interface to Metal: it compiles here with the house's warnings as errors,
    without a macOS SDK (`make metal-check` then links it for macOS)."""
    cxx, include = shutil.which("g++") or shutil.which("c++"), _tf_include()
    if cxx is None or include is None:
        pytest.skip("needs a C++ compiler and `make` (build/tf_flags.mk)")
    sources = [GLUE_CC] + OP_GLUE_FILES
    out = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-sign-compare", "-Werror", "-I", ROOT,
                          "-I", include] + sources, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]


def test_zero_fills_run_on_the_compute_encoder():
    # A plan's zero-fill is a pass of the fill shader (PlanBuilder::Zero),
    # encoded on the plan's one compute encoder: no blit encoder between
    # dispatches (whose ordering would rest on hazard tracking nobody verified
    # on tensorflow-metal's buffers).
    plan = open(os.path.join(ROOT, "kernels", "metal_plan", "plan.cc")).read()
    assert '"fill_zero"' in plan.split("PlanBuilder& PlanBuilder::FillZero(", 1)[1].split("\n}\n", 1)[0]
    for path in glob.glob(os.path.join(ROOT, "kernels", "*", "*.mm")):
        assert "blitCommandEncoder" not in _code(path), path
