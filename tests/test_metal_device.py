"""The Metal kernels on the real device (macOS, Apple GPU, tensorflow-metal).

The GPU-against-CPU comparisons are the package's self-test
(metal_ops.selftest, which users run as `python -m metal_ops.selftest`), one
test per case; beside them, what the self-test does not cover: kernel
registration, tf.function, error messages, bitwise reproducibility.

Skipped with the reason everywhere else (no Mac in this project's CI); the
macOS workflow (.github/workflows/macos.yml) sets METAL_OPS_REQUIRE_METAL=1,
which turns that skip into a failure, so a runner without a Metal GPU cannot
pass silently. The shaders themselves are also checked on every machine
through the MSL shim (tests/metal_shim, in each op's tests) and the MSL rules
check (tests/test_msl_check.py).
"""
import glob
import os
import platform
import re

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import selftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRE = os.environ.get("METAL_OPS_REQUIRE_METAL") == "1"


def _why_no_metal_gpu():
    if platform.system() != "Darwin":
        return f"Metal kernels need macOS with tensorflow-metal; this is {platform.system()}"
    try:
        from importlib import metadata

        metadata.version("tensorflow-metal")
    except Exception:
        return "tensorflow-metal is not installed (pip install -r requirements-macos-metal.txt)"
    if not tf.config.list_physical_devices("GPU"):
        return "tensorflow-metal is installed but TensorFlow sees no GPU device"
    if "metal" not in metal_ops.build_info()["backends"]:
        return "the op library was built without the Metal backend"
    return None


_REASON = _why_no_metal_gpu()
if _REASON is not None and REQUIRE:
    raise RuntimeError(f"METAL_OPS_REQUIRE_METAL=1 but no Metal GPU: {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture(autouse=True, scope="module")
def _gpu_sync_mode():
    """This module's Metal ops commit, wait and report GPU-side errors (the
    self-test's mode): the library reads METAL_OPS_GPU_SYNC at every op call,
    so setting it here applies to these tests whatever ran before them, and
    restoring it afterwards leaves later modules as they were."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(selftest.SYNC_ENV, "1")
        yield


def _declared_ops():
    """The ops the tree's sources declare; none without the tree (the suite against a wheel)."""
    if not os.path.isdir(os.path.join(ROOT, "tools")):
        return set()
    from tools.check.check_op_library import declared_ops

    return declared_ops()


def _ops_with_metal_kernels():
    """Declared op names that some kernels/*/*_metal.cc file mentions as a string."""
    declared = _declared_ops()
    found = set()
    for path in glob.glob(os.path.join(ROOT, "kernels", "*", "*_metal.cc")):
        with open(path, encoding="utf-8") as f:
            found.update(s for s in re.findall(r'"([A-Za-z0-9_]+)"', f.read()) if s in declared)
    return sorted(found)


@pytest.mark.parametrize("op_name", _ops_with_metal_kernels())
def test_metal_kernel_is_registered_for_gpu(op_name):
    from tensorflow.python.framework import kernels

    metal_ops.load_library()
    devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op_name).kernel}
    assert "GPU" in devices, f"{op_name}: kernels registered for {sorted(devices)}, none for GPU"


def test_zero_out_on_metal_gpu_in_tf_function():
    f = tf.function(lambda v: metal_ops.zero_out(v, preserve_index=2))
    with tf.device("/GPU:0"):
        y = f(tf.constant([1.5, 2.5, 3.5, 4.5]))
    np.testing.assert_array_equal(y.numpy(), [0, 0, 3.5, 0])


def test_zero_out_bad_index_on_metal_gpu_names_argument():
    with tf.device("/GPU:0"):
        with pytest.raises(tf.errors.InvalidArgumentError, match="preserve_index 5.*'to_zero' with 3 elements"):
            metal_ops.zero_out(tf.constant([1.0, 2.0, 3.0]), preserve_index=5)


# ---- every op on the GPU against its CPU kernel: the package's self-test ------------------
# metal_ops.selftest's cases (every op, float32 and float16, odd sizes, empty
# tensors: TF places a Metal kernel's empty inputs and outputs as its
# EmptyTensor, no MTLBuffer), one test each, with its comparison.

def _case_id(case):
    return re.sub(r"[^A-Za-z0-9=_.]+", "_", f"{case.op}-{case.dtype}-{case.label}").strip("_")


SELFTEST_CASES = selftest.cases() if _REASON is None else []


@pytest.mark.parametrize("case", SELFTEST_CASES, ids=[_case_id(c) for c in SELFTEST_CASES])
def test_op_on_metal_gpu_matches_cpu(case):
    row = selftest.run_case(case, "/GPU:0", selftest.cpu_reference, repeat=1)
    assert row["passed"], (f"{case.op} {case.dtype} {case.label}: error {row['error']} > tolerance "
                           f"{row['tolerance']} {row['note']}")


def test_fused_mlp_gradients_on_metal_gpu_are_bitwise_reproducible():
    # The self-test's large FusedMLP case twice: no atomics, one summation order.
    case = next(c for c in selftest.cases({"fused_mlp"}) if c.dtype == "float32" and c.label.startswith("n=65536"))
    first = selftest.execute(case, "/GPU:0")[1]
    second = selftest.execute(case, "/GPU:0")[1]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
