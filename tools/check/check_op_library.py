"""Checks a built op library: it loads in this TensorFlow, registers every op
that kernels/*/*_op.cc declares, and ZeroOut computes the right values.

    python tools/check/check_op_library.py build/bazel-bin/_metal_ops.so [--plugin build/bazel-bin/_metal_ops_grappler.so]

With --plugin it also checks that the Grappler plugin library opens in this
process and exports TF_InitGraph (it is not registered with Grappler here).

Run it in a fresh process: loading two copies of the same ops into one
process fails on duplicate registrations. Used by tools/build/bazel_build.sh
(`make bazel`); works for the make-built library too.
"""
import glob
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_REGISTER_OP = re.compile(r'REGISTER_OP\(\s*"([A-Za-z0-9_]+)"\s*\)')


def declared_ops(root=ROOT):
    """Op names registered with a literal REGISTER_OP("Name") in the op
    folders' kernels/<op>/<op>_op.cc."""
    names = set()
    paths = glob.glob(os.path.join(root, "kernels", "*", "*_op.cc"))
    for path in sorted(paths):
        with open(path, encoding="utf-8") as f:
            names.update(_REGISTER_OP.findall(f.read()))
    return names


def main(argv):
    args = argv[1:]
    plugin = None
    if "--plugin" in args:
        i = args.index("--plugin")
        if i + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        plugin = os.path.abspath(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    lib = os.path.abspath(args[0])
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry

    module = tf.load_op_library(lib)

    missing = sorted(n for n in declared_ops() if op_def_registry.get(n) is None)
    if missing:
        print(f"check_op_library: {lib} does not register {missing}", file=sys.stderr)
        return 1

    # ZeroOut, independent of the metal_ops package: plain NumPy reference.
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    with tf.device("/CPU:0"):
        got = module.zero_out(x, preserve_index=5).numpy()
    want = np.zeros_like(x)
    want.flat[5] = x.flat[5]
    if not np.array_equal(got, want):
        print(f"check_op_library: ZeroOut gave {got.tolist()}, expected {want.tolist()}", file=sys.stderr)
        return 1
    try:
        with tf.device("/CPU:0"):
            module.zero_out([1, 2, 3], preserve_index=3)
    except tf.errors.InvalidArgumentError:
        pass
    else:
        print("check_op_library: ZeroOut accepted preserve_index=3 for 3 elements", file=sys.stderr)
        return 1

    plugin_note = ""
    if plugin is not None:
        import ctypes

        try:
            handle = ctypes.CDLL(plugin)
        except OSError as e:
            print(f"check_op_library: cannot open the Grappler plugin {plugin}: {e}", file=sys.stderr)
            return 1
        if not hasattr(handle, "TF_InitGraph"):
            print(f"check_op_library: {plugin} does not export TF_InitGraph", file=sys.stderr)
            return 1
        plugin_note = f"; {os.path.relpath(plugin, ROOT)} opens and exports TF_InitGraph"

    ops = sorted(declared_ops())
    print(f"check_op_library: {os.path.relpath(lib, ROOT)} loads in TensorFlow {tf.__version__}, "
          f"registers {len(ops)} ops ({', '.join(ops)}), ZeroOut OK{plugin_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
