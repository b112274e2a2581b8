"""The rule that the op library must load before TensorFlow's first op for XLA
to take its kernels in (docs/XLA.md), and that every op with XLA kernels has
its tests under XLA (tests/test_<op>_xla.py, tests/xla_checks.py)."""
import os
import subprocess
import sys
import textwrap

import pytest

from metal_ops import selftest
from tests.xla_checks import XLA_MARKS

pytestmark = XLA_MARKS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def xla_tests(op):
    """The file of an op's tests under XLA: tests/test_<op>_xla.py, or its own
    tests/test_<op>.py where those compile it (jit_compile=True); None without."""
    for name in (f"test_{op}_xla.py", f"test_{op}.py"):
        path = os.path.join(ROOT, "tests", name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                if name.endswith("_xla.py") or "jit_compile=True" in f.read():
                    return name
    return None


@pytest.mark.cpu_semantics("a property of the build, not of a device")
def test_every_op_with_xla_kernels_has_its_xla_tests():
    assert selftest.xla_ops(), "no op has XLA kernels in this process"
    missing = [op for op in selftest.xla_ops() if xla_tests(op) is None]
    assert not missing, f"ops with XLA kernels but no tests under XLA (tests/test_<op>_xla.py): {missing}"


def _run_child(code, *argv):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], capture_output=True, text=True,
                          timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.cpu_semantics("a property of the process, not of a device")
def test_importing_metal_ops_before_the_first_compile_gives_xla_kernels():
    rc, out = _run_child("""
        import tensorflow as tf
        import metal_ops
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2]))  # XLA's first compilation
        y = tf.function(metal_ops.trunc_exp, jit_compile=True)(tf.zeros([3]))
        print("ok", y.numpy().tolist())
    """)
    assert rc == 0 and "ok [1.0, 1.0, 1.0]" in out, out


@pytest.mark.cpu_semantics("a property of the process, not of a device")
def test_a_library_loaded_after_the_first_compile_has_no_xla_kernels():
    """XLA takes op kernels in once: importing metal_ops after a compilation is too late (docs/XLA.md)."""
    rc, out = _run_child("""
        import warnings
        import tensorflow as tf
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import metal_ops
        print("warned:", [str(w.message) for w in caught if w.category is RuntimeWarning])
        print("has_xla_kernels:", metal_ops._loader.has_xla_kernels(), metal_ops.layers.FusedMLP(4).supports_jit)
        print("runs:", metal_ops.trunc_exp(tf.zeros([2])).numpy().tolist())
        try:
            tf.function(metal_ops.trunc_exp, jit_compile=True)(tf.zeros([3]))
        except tf.errors.InvalidArgumentError as e:
            print("refused:", str(e).splitlines()[0])
    """)
    assert rc == 0 and "refused:" in out and "MetalOpsTruncExp" in out, out
    assert "warned: [\"metal_ops: TensorFlow ran an op in this process before" in out, out
    assert "Import metal_ops right after tensorflow, before any of these" in out, out
    assert "has_xla_kernels: False False" in out and "runs: [1.0, 1.0]" in out, out


@pytest.mark.cpu_semantics("a property of the process, not of a device")
def test_xla_takes_kernels_in_at_tensorflows_first_op_not_at_device_setup():
    """Setting up and listing devices runs no op (metal_ops imported after them compiles under XLA);
    creating a tf.distribute strategy runs one, and the warning then says what to do."""
    code = """
        import sys, warnings
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        tf.config.list_logical_devices()
        if sys.argv[1:] == ["strategy"]:
            tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import metal_ops
        print("warned:", [str(w.message) for w in caught if w.category is RuntimeWarning])
        print("registered:", metal_ops._loader.xla_status()[0])
    """
    rc, out = _run_child(code)
    assert rc == 0 and "registered: True" in out and "warned: []" in out, out
    rc, out = _run_child(code, "strategy")
    assert rc == 0 and "registered: False" in out, out
    assert "TensorFlow ran an op in this process before the metal_ops op library loaded" in out, out
    assert "a tf.distribute strategy runs one" in out and "Import metal_ops right after tensorflow" in out, out
