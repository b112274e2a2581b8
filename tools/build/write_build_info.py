"""Records what the op library was built against (read by metal_ops' loader).

    write_build_info.py --out PKG/_build_info.json --tf-version X --platform Linux-x86_64 \\
        --backends "cpu ..." --lib PKG/_metal_ops.so                 # `make`: one -march=native library
    write_build_info.py --out PKG/_build_info.json ... --isa-levels "x86-64-v2 x86-64-v3 ..." [--merge]
                                                                     # `make isa-libs`: one library per level
    write_build_info.py --merge --out ... --backends cuda --cuda-library PKG/_metal_ops_cuda.so \
        --cuda-archs '{"sass": [...], "ptx": [...], "dropped": [...]}'  # `make cuda-lib`

    write_build_info.py --add-build BUILD/_build_info.json --out PKG/_build_info.json [--tensorflow-metal 1.2.0]
                                                                     # `make metal-check`: the macOS wheel's builds

--add-build adds one build (a `make` build info with its library and Grappler
plugin) to the "tensorflow_builds" of --out, replacing one of the same
TensorFlow minor version: the macOS wheel holds one op library per TensorFlow
stack, and metal_ops' loader picks the one of the running TensorFlow.

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


def minor(version):
    return tuple(int(p) for p in version.split(".")[:2])


def add_build(out, build_info_path, tensorflow_metal=None):
    """Adds the build of `build_info_path` to the "tensorflow_builds" of `out`
    (newest TensorFlow first)."""
    with open(build_info_path) as f:
        single = json.load(f)
    build = {key: single[key] for key in ("tensorflow_version", "library", "grappler_library", "backends")
             if key in single}
    build["tensorflow_metal"] = tensorflow_metal or None
    info = {"platform": single["platform"], "tensorflow_builds": []}
    if os.path.exists(out):
        with open(out) as f:
            info = json.load(f)
        if info.get("platform") != single["platform"] or "tensorflow_builds" not in info:
            info = {"platform": single["platform"], "tensorflow_builds": []}
    builds = [b for b in info["tensorflow_builds"] if minor(b["tensorflow_version"]) != minor(build["tensorflow_version"])]
    info["tensorflow_builds"] = sorted(builds + [build], key=lambda b: minor(b["tensorflow_version"]), reverse=True)
    info["backends"] = sorted({name for b in info["tensorflow_builds"] for name in b.get("backends", [])})
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--add-build", help="a one-build _build_info.json to add to --out's tensorflow_builds")
    parser.add_argument("--tensorflow-metal", help="with --add-build: the tensorflow-metal release of that stack")
    parser.add_argument("--backends")
    parser.add_argument("--tf-version")
    parser.add_argument("--platform", help="<system>-<machine> of the target, e.g. Darwin-arm64")
    parser.add_argument("--lib", help="the one op library of a -march=native (or macOS) build")
    parser.add_argument("--grappler-lib", help="its Grappler plugin, when not _metal_ops_grappler.so")
    parser.add_argument("--isa-levels", help="x86-64 levels with a library each (_metal_ops.<level>.so)")
    parser.add_argument("--isa-tune", help="the -mtune of those libraries")
    parser.add_argument("--cuda-library", help="the GPU kernels' library (`make cuda-lib`), loaded after the op library")
    parser.add_argument("--cuda-archs", help="its architectures, JSON from tools/build/cuda_archs.py describe")
    parser.add_argument("--cuda-version", help="the CUDA toolkit it was built with, e.g. 13.0 (its driver requirement)")
    parser.add_argument("--merge", action="store_true", help="keep the keys the file already has")
    args = parser.parse_args()
    if args.add_build:
        info = add_build(args.out, args.add_build, args.tensorflow_metal)
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
        return
    if not (args.backends and args.platform):
        parser.error("--backends and --platform are required (or --add-build)")
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
    if args.grappler_lib and os.path.basename(args.grappler_lib) != "_metal_ops_grappler.so":
        info["grappler_library"] = os.path.basename(args.grappler_lib)
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
