"""Prints make variables with the compile and link flags of the libraries the
op library builds against: TensorFlow (TF_CFLAGS, TF_LFLAGS) and OpenBLAS from
the pinned scipy-openblas32 package (BLAS_CFLAGS, BLAS_LFLAGS: the fused
convolution's GEMM).

By default from the installed packages (tf.sysconfig, scipy_openblas32). With
--macos-wheel-dir DIR, from the macOS wheels unpacked into DIR (what
`make metal-check` builds against on Linux): the flags those packages give on
macOS, pointing into DIR.

The library finds OpenBLAS at run time through two rpaths: the package's lib
folder beside an installed metal_ops (site-packages/scipy_openblas32/lib, as
TensorFlow's own libraries are found beside it) and the folder it was built
against (a source-tree build).
"""
import argparse
import os
import re
import sys


def blas_flags(include, lib_dir, darwin):
    """OpenBLAS (scipy-openblas32): headers, the library and its rpaths."""
    origin = "@loader_path" if darwin else "'$$ORIGIN'"
    return {
        "BLAS_CFLAGS": f"-I{include}",
        "BLAS_LFLAGS": f"-L{lib_dir} -lscipy_openblas -Wl,-rpath,{origin}/../scipy_openblas32/lib "
                       f"-Wl,-rpath,{lib_dir}",
    }


def installed_flags():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import scipy_openblas32
    except ImportError:
        sys.exit("tf_flags: scipy-openblas32 is not installed in this Python: "
                 "`pip install -r requirements.txt` (it pins the OpenBLAS the op library links)")
    import tensorflow as tf

    return {
        "TF_CFLAGS": " ".join(tf.sysconfig.get_compile_flags()),
        "TF_LFLAGS": " ".join(tf.sysconfig.get_link_flags()),
        "TF_VERSION": tf.__version__,
        "TF_IS_CUDA_BUILD": "1" if tf.test.is_built_with_cuda() else "0",
        **blas_flags(scipy_openblas32.get_include_dir(), scipy_openblas32.get_lib_dir(),
                     sys.platform == "darwin"),
    }


def wheel_version(include_dir):
    """The version of an unpacked TensorFlow wheel: its version.h defines it up
    to 2.19; from 2.20 on the build passes it as -D flags, and the wheel's
    `tensorflow-X.dist-info/METADATA` beside `tensorflow/` says it."""
    path = os.path.join(include_dir, "tensorflow", "core", "public", "version.h")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = [re.search(rf"#define TF_{name}_VERSION (\d+)", text) for name in ("MAJOR", "MINOR", "PATCH")]
    if all(parts):
        return ".".join(p.group(1) for p in parts)
    root = os.path.dirname(os.path.dirname(os.path.abspath(include_dir)))
    for name in sorted(os.listdir(root)):
        metadata = os.path.join(root, name, "METADATA")
        if name.startswith("tensorflow-") and name.endswith(".dist-info") and os.path.exists(metadata):
            with open(metadata, encoding="utf-8") as f:
                found = re.search(r"^Version: (\d+\.\d+\.\d+)\s*$", f.read(), re.M)
            if found:
                return found.group(1)
    sys.exit(f"tf_flags: cannot read the TensorFlow version from {path} nor from a tensorflow-*.dist-info in {root}")


def macos_wheel_flags(root):
    tf_dir = os.path.abspath(os.path.join(root, "tensorflow"))
    include = os.path.join(tf_dir, "include")
    if not os.path.isdir(include):
        sys.exit(f"tf_flags: {include} is missing: unpack the macOS TensorFlow wheel into {root}")
    # tf.sysconfig on macOS: the same compile flags as on Linux, and
    # -ltensorflow_framework.<major> instead of Linux's -l:libtensorflow_framework.so.<major>.
    version = wheel_version(include)
    blas = os.path.abspath(os.path.join(root, "scipy_openblas32"))
    if not os.path.isdir(os.path.join(blas, "include")):
        sys.exit(f"tf_flags: {blas}/include is missing: unpack the macOS scipy-openblas32 wheel into {root}")
    return {
        "TF_CFLAGS": f"-I{include} -D_GLIBCXX_USE_CXX11_ABI=1 --std=c++17 -DEIGEN_MAX_ALIGN_BYTES=64",
        "TF_LFLAGS": f"-L{tf_dir} -ltensorflow_framework.{version.split('.')[0]}",
        "TF_VERSION": version,
        "TF_IS_CUDA_BUILD": "0",
        **blas_flags(os.path.join(blas, "include"), os.path.join(blas, "lib"), darwin=True),
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
