"""Prints make variables with TensorFlow's compile and link flags.

By default from the installed TensorFlow (tf.sysconfig). With
--macos-wheel-dir DIR, from a macOS TensorFlow wheel unpacked into DIR (what
`make metal-check` builds against on Linux): the flags tf.sysconfig gives on
macOS, pointing into DIR.
"""
import argparse
import os
import re
import sys


def installed_flags():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    return {
        "TF_CFLAGS": " ".join(tf.sysconfig.get_compile_flags()),
        "TF_LFLAGS": " ".join(tf.sysconfig.get_link_flags()),
        "TF_VERSION": tf.__version__,
        "TF_IS_CUDA_BUILD": "1" if tf.test.is_built_with_cuda() else "0",
    }


def wheel_version(include_dir):
    path = os.path.join(include_dir, "tensorflow", "core", "public", "version.h")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = [re.search(rf"#define TF_{name}_VERSION (\d+)", text) for name in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        sys.exit(f"tf_flags: cannot read the TensorFlow version from {path}")
    return ".".join(p.group(1) for p in parts)


def macos_wheel_flags(root):
    tf_dir = os.path.abspath(os.path.join(root, "tensorflow"))
    include = os.path.join(tf_dir, "include")
    if not os.path.isdir(include):
        sys.exit(f"tf_flags: {include} is missing: unpack the macOS TensorFlow wheel into {root}")
    # tf.sysconfig on macOS: the same compile flags as on Linux, and
    # -ltensorflow_framework.<major> instead of Linux's -l:libtensorflow_framework.so.<major>.
    version = wheel_version(include)
    return {
        "TF_CFLAGS": f"-I{include} -D_GLIBCXX_USE_CXX11_ABI=1 --std=c++17 -DEIGEN_MAX_ALIGN_BYTES=64",
        "TF_LFLAGS": f"-L{tf_dir} -ltensorflow_framework.{version.split('.')[0]}",
        "TF_VERSION": version,
        "TF_IS_CUDA_BUILD": "0",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--macos-wheel-dir", help="a macOS TensorFlow wheel unpacked here (metal-check)")
    args = parser.parse_args()
    flags = macos_wheel_flags(args.macos_wheel_dir) if args.macos_wheel_dir else installed_flags()
    for name, value in flags.items():
        print(f"{name} := {value}")


if __name__ == "__main__":
    main()
