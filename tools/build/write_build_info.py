"""Records what the op library was built against (read by metal_ops' loader).

    write_build_info.py --out PKG/_build_info.json --tf-version X --platform Linux-x86_64 \\
        --backends "cpu ..." --lib PKG/_metal_ops.so                 # `make`: one -march=native library
    write_build_info.py --out PKG/_build_info.json ... --isa-levels "x86-64-v2 x86-64-v3 ..." [--merge]
                                                                     # `make isa-libs`: one library per level
    write_build_info.py --merge --out ... --backends cuda --cuda-library PKG/_metal_ops_cuda.so \
        --cuda-archs '{"sass": [...], "ptx": [...], "dropped": [...]}'  # `make cuda-lib`

The TensorFlow version comes from the flags the library was compiled with
(tools/build/tf_flags.py's TF_VERSION), so a cross build (macOS, `make metal-check`)
records the TensorFlow it was built against, not the one running here.
--merge keeps what the file already says (a tree with both kinds of library).
"""
import argparse
import json
import os


def isa_library_name(level):
    """The file name of the op library built for one x86-64 level (the Makefile's isa-lib-%)."""
    return f"_metal_ops.{level}.so"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--backends", required=True)
    parser.add_argument("--tf-version", required=True)
    parser.add_argument("--platform", required=True, help="<system>-<machine> of the target, e.g. Darwin-arm64")
    parser.add_argument("--lib", help="the one op library of a -march=native (or macOS) build")
    parser.add_argument("--isa-levels", help="x86-64 levels with a library each (_metal_ops.<level>.so)")
    parser.add_argument("--isa-tune", help="the -mtune of those libraries")
    parser.add_argument("--cuda-library", help="the GPU kernels' library (`make cuda-lib`), loaded after the op library")
    parser.add_argument("--cuda-archs", help="its architectures, JSON from tools/build/cuda_archs.py describe")
    parser.add_argument("--cuda-version", help="the CUDA toolkit it was built with, e.g. 13.0 (its driver requirement)")
    parser.add_argument("--merge", action="store_true", help="keep the keys the file already has")
    args = parser.parse_args()
    if not args.tf_version:
        parser.error("--tf-version is empty: build/tf_flags.mk has no TF_VERSION (delete it and rerun make)")
    info = {}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            info = json.load(f)
        if info.get("tensorflow_version") not in (None, args.tf_version):
            info = {}  # the other libraries were built against another TensorFlow: not usable beside these
    info.update({
        "tensorflow_version": args.tf_version,
        "backends": list(dict.fromkeys(info.get("backends", []) + args.backends.split())),
        "platform": args.platform,
    })
    if args.lib:
        info["library"] = os.path.basename(args.lib)
    if args.isa_levels:
        info["isa_libraries"] = {level: isa_library_name(level) for level in args.isa_levels.split()}
        info["isa_tune"] = args.isa_tune or "generic"
    if args.cuda_library:
        info["cuda_library"] = os.path.basename(args.cuda_library)
        info["cuda_archs"] = json.loads(args.cuda_archs) if args.cuda_archs else None
        info["cuda_version"] = args.cuda_version or None
    with open(args.out, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
