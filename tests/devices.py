"""The devices the op tests run on: one mechanism for a CUDA GPU, Apple's Metal
GPU (tensorflow-metal) and the CPU (docs/METAL_COMPAT.md, "Running the tests";
docs/BUILDING.md, "TensorFlow's CUDA build").

A module marked `pytest.mark.every_device` runs each of its tests once per
device: the CPU, and the first GPU when TensorFlow lists one. A test marked
`pytest.mark.cpu_semantics("why")` checks what only the CPU kernels do (bad
values raise; bitwise-reproducible results) and runs on /CPU:0 alone, on every
machine. METAL_OPS_TEST_DEVICES (e.g. "GPU" or "CPU,GPU") picks the device
types instead; a type the machine lacks is an error, not a silent skip.
"""
import os

ENV = "METAL_OPS_TEST_DEVICES"
TYPES = ("CPU", "GPU")


def device_names(env=None, logical_types=None):
    """TensorFlow device names, e.g. ["/CPU:0", "/GPU:0"].

    `logical_types` (the device types TensorFlow lists) and `env` are
    parameters so the choice itself can be tested without a GPU."""
    env = os.environ if env is None else env
    if logical_types is None:
        import tensorflow as tf

        logical_types = [d.device_type for d in tf.config.list_logical_devices()]
    present = [t for t in TYPES if t in logical_types]
    wanted = env.get(ENV, "").replace(" ", "")
    if not wanted:
        return [f"/{t}:0" for t in present]
    names = []
    for t in wanted.split(","):
        t = t.upper()
        if t not in TYPES:
            raise ValueError(f"{ENV}={env[ENV]!r}: unknown device type {t!r} (use CPU, GPU or both, comma-separated)")
        if t not in present:
            raise ValueError(f"{ENV}={env[ENV]!r}: TensorFlow lists no {t} device here "
                             f"(it lists {', '.join(present) or 'none'})")
        names.append(f"/{t}:0")
    return names


def device_id(name):
    """The test-id part of a device name: "/GPU:0" -> "GPU"."""
    return name.strip("/").split(":")[0]


def gpu_is_metal():
    """Whether TensorFlow's GPU is Apple's Metal device (tensorflow-metal)."""
    import sys

    if sys.platform != "darwin":
        return False
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))
