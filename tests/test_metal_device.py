"""The Metal kernels on the real device (macOS, Apple GPU, tensorflow-metal).

Skipped with the reason everywhere else (no Mac in this project's CI); the
macOS workflow (.github/workflows/macos.yml) sets METAL_OPS_REQUIRE_METAL=1,
which turns that skip into a failure, so a runner without a Metal GPU cannot
pass silently. The shaders themselves are also checked on every machine
through the MSL shim (tests/metal_shim, in each op's tests).
"""
import glob
import os
import platform
import re

import numpy as np
import pytest
import tensorflow as tf

import metal_ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRE = os.environ.get("METAL_OPS_REQUIRE_METAL") == "1"


def _why_no_metal_gpu():
    if platform.system() != "Darwin":
        return f"Metal kernels need macOS with tensorflow-metal; this is {platform.system()}"
    try:
        from importlib import metadata

        metadata.version("tensorflow-metal")
    except Exception:
        return "tensorflow-metal is not installed (pip install -r requirements-macos.txt)"
    if not tf.config.list_physical_devices("GPU"):
        return "tensorflow-metal is installed but TensorFlow sees no GPU device"
    if "metal" not in metal_ops.build_info()["backends"]:
        return "the op library was built without the Metal backend"
    return None


_REASON = _why_no_metal_gpu()
if _REASON is not None and REQUIRE:
    raise RuntimeError(f"METAL_OPS_REQUIRE_METAL=1 but no Metal GPU: {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _declared_ops():
    names = set()
    for path in glob.glob(os.path.join(ROOT, "ops", "*.cc")):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r'REGISTER_OP\(\s*"([A-Za-z0-9_]+)"\s*\)', f.read()))
    return names


def _ops_with_metal_kernels():
    """Declared op names that some kernels/metal/*.mm file mentions as a string."""
    declared = _declared_ops()
    found = set()
    for path in glob.glob(os.path.join(ROOT, "kernels", "metal", "*.mm")):
        with open(path, encoding="utf-8") as f:
            found.update(s for s in re.findall(r'"([A-Za-z0-9_]+)"', f.read()) if s in declared)
    return sorted(found)


@pytest.mark.parametrize("op_name", _ops_with_metal_kernels())
def test_metal_kernel_is_registered_for_gpu(op_name):
    from tensorflow.python.framework import kernels

    metal_ops.load_library()
    devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op_name).kernel}
    assert "GPU" in devices, f"{op_name}: kernels registered for {sorted(devices)}, none for GPU"


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("shape,preserve", [((7,), 3), ((3, 5, 2), 29), ((1_000_003,), 1_000_002), ((0, 4), 9)])
def test_zero_out_on_metal_gpu(dtype, shape, preserve):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    want = np.zeros_like(x)
    if x.size:
        want.flat[preserve] = x.flat[preserve]
    with tf.device("/GPU:0"):
        xt = tf.constant(x)
        y = metal_ops.zero_out(xt, preserve_index=preserve)
    assert "GPU" in y.device, f"ran on {y.device}"
    np.testing.assert_array_equal(y.numpy(), want)


def test_zero_out_on_metal_gpu_in_tf_function():
    f = tf.function(lambda v: metal_ops.zero_out(v, preserve_index=2))
    with tf.device("/GPU:0"):
        y = f(tf.constant([1.5, 2.5, 3.5, 4.5]))
    np.testing.assert_array_equal(y.numpy(), [0, 0, 3.5, 0])


def test_zero_out_bad_index_on_metal_gpu_names_argument():
    with tf.device("/GPU:0"):
        with pytest.raises(tf.errors.InvalidArgumentError, match="preserve_index 5.*'to_zero' with 3 elements"):
            metal_ops.zero_out(tf.constant([1.0, 2.0, 3.0]), preserve_index=5)
