"""Checks of the macOS binaries the Metal backend depends on, run on Linux.

    python tools/check/macos_binaries.py plugin-compat --plugin tensorflow-plugins/libmetal_plugin.dylib \\
        --tf-dir A/tensorflow [--tf-dir B/tensorflow ...]
    python tools/check/macos_binaries.py stream-protocol --plugin tensorflow-plugins/libmetal_plugin.dylib \\
        --header kernels/metal/tf_metal_stream.h
    python tools/check/macos_binaries.py binds --plugin tensorflow-plugins/libmetal_plugin.dylib
    python tools/check/macos_binaries.py exports --lib tensorflow/libtensorflow_framework.2.dylib TF_GetStream ...
    python tools/check/macos_binaries.py wheel --wheel dist/tf_metal_ops-...-py3-none-macosx_12_0_arm64.whl \\
        --site-packages build/macos/tf-<v1>-openblas-<v> --site-packages build/macos/tf-<v2>-openblas-<v> \\
        --sdk MacOSX.sdk --macos-min 12.0

What each command checks is said where it is checked, in tools/check/macos_checks/:
wheel.py (our macOS wheel), plugin_compat.py (whether dyld loads
tensorflow-metal's plugin into each TensorFlow), stream_protocol.py (the
plugin's stream class against our `TF_MetalStream`); binds and exports list
what macho.py, the Mach-O reader they share, reads.

Exit status: 0 when the checks pass, 1 when one fails (the reason on stderr),
2 when an input cannot be read. --tf-dir takes either the `tensorflow/` folder
of an unpacked wheel or the folder holding it (the version is read from a
`tensorflow-X.dist-info` beside it, else from the path).
"""
import argparse
import os
import sys

try:  # imported as tools.check.macos_binaries
    from tools.check.check_report import report
    from tools.check.macos_checks import macho, plugin_compat, stream_protocol, tensorflow_wheel, wheel
except ImportError:  # run as tools/check/macos_binaries.py: tools/check/ is on sys.path
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))  # tf_flags
    from check_report import report
    from macos_checks import macho, plugin_compat, stream_protocol, tensorflow_wheel, wheel


# ---- command line -----------------------------------------------------------------------

def cmd_binds(args):
    plugin = macho.MachO(args.plugin)
    print(f"{args.plugin}: {'two-level' if plugin.flags & macho.MH_TWOLEVEL else 'flat'} namespace; "
          f"install name {plugin.install_name}")
    for rpath in plugin.rpaths:
        print(f"  LC_RPATH {rpath}")
    for i, (_, path) in enumerate(plugin.dylibs, 1):
        print(f"  ordinal {i}: {path}")
    for library, binds in sorted(macho.binds_by_library(plugin).items()):
        lazy = sum(b.lazy for b in binds)
        print(f"{library}: {len(binds)} symbols ({len(binds) - lazy} non-lazy, {lazy} lazy)")
        if args.all or not library.startswith(("/usr/lib/", "/System/")):
            for b in sorted(binds, key=lambda b: b.symbol):
                tags = [t for t, on in (("lazy", b.lazy), ("weak-import", b.weak_import)) if on]
                print(f"  {b.symbol}{'  (' + ', '.join(tags) + ')' if tags else ''}")
    return 0


def cmd_plugin_compat(args):
    plugin = macho.MachO(args.plugin)
    results = [plugin_compat.check_plugin_compat(plugin, tensorflow_wheel.TensorFlow(d)) for d in args.tf_dir]
    for r in results:
        print(f"TensorFlow {r.version}: {'loads' if r.loads else 'does NOT load'} {os.path.basename(args.plugin)}")
        for line in r.lines:
            print(f"  {line}")
        for line in r.problems:
            print(f"  FAIL: {line}")
        if args.verbose and r.missing:
            print("  missing: " + " ".join(r.missing))
    print()
    print("| TensorFlow | loads | TensorFlow binds resolved | missing (examples) |")
    print("| --- | --- | --- | --- |")
    for r in results:
        examples = ", ".join(f"`{s}`" for s in r.missing[:2]) or "-"
        print(f"| {r.version} | {'yes' if r.loads else 'NO'} | {r.resolved}/{r.bound} | {examples} |")
    failed = [r.version for r in results if not r.loads]
    if failed:
        print(f"plugin-compat: {os.path.basename(args.plugin)} cannot load with TensorFlow "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_stream_protocol(args):
    ok, lines = stream_protocol.check_stream_protocol(args.plugin, args.header, args.protocol)
    print("\n".join(f"stream-protocol: {line}" for line in lines))
    if not ok:
        print(f"stream-protocol: {os.path.basename(args.plugin)} does not implement {args.protocol} "
              f"as {args.header} declares it", file=sys.stderr)
    return 0 if ok else 1


def cmd_exports(args):
    image = macho.MachO(args.lib)
    trie = image.exports()
    missing = []
    for name in args.symbols:
        symbol = name if name.startswith("_") else "_" + name  # C names carry a leading underscore
        found = trie.lookup(symbol)
        if found is None:
            missing.append(symbol)
            print(f"{symbol}: NOT EXPORTED")
        elif found[0] == "reexport":
            print(f"{symbol}: re-exported from {image.library(found[1])}")
        else:
            print(f"{symbol}: defined")
    if missing:
        print(f"exports: {os.path.basename(args.lib)} does not export {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0


def cmd_wheel(args):
    problems, notes = wheel.check_macos_wheel(args.wheel, [os.path.abspath(s) for s in args.site_packages],
                                              args.sdk, args.macos_min)
    return report("macos wheel", args.wheel, problems, notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugin-compat", help="whether the plugin loads with each TensorFlow")
    p.add_argument("--plugin", required=True, help="tensorflow-plugins/libmetal_plugin.dylib")
    p.add_argument("--tf-dir", required=True, action="append",
                   help="an unpacked TensorFlow wheel's tensorflow/ folder (repeatable)")
    p.add_argument("--verbose", action="store_true", help="list every missing symbol")
    p.set_defaults(run=cmd_plugin_compat)
    p = sub.add_parser("stream-protocol", help="the plugin's stream class implements our protocol")
    p.add_argument("--plugin", required=True)
    p.add_argument("--header", required=True)
    p.add_argument("--protocol", default="TF_MetalStream")
    p.set_defaults(run=cmd_stream_protocol)
    p = sub.add_parser("binds", help="the plugin's load commands and the symbols bound to each library")
    p.add_argument("--plugin", required=True)
    p.add_argument("--all", action="store_true", help="list system libraries' symbols too")
    p.set_defaults(run=cmd_binds)
    p = sub.add_parser("exports", help="whether a library's export trie has these symbols")
    p.add_argument("--lib", required=True)
    p.add_argument("symbols", nargs="+")
    p.set_defaults(run=cmd_exports)
    p = sub.add_parser("wheel", help="the macOS wheel: tag, arm64, minimum macOS, binds, rpaths, exports")
    p.add_argument("--wheel", required=True)
    p.add_argument("--site-packages", required=True, action="append",
                   help="the pinned macOS TensorFlow and scipy-openblas32 wheels unpacked side by side; once per "
                   "TensorFlow the wheel has a build for")
    p.add_argument("--sdk", required=True)
    p.add_argument("--macos-min", required=True, help="the documented minimum macOS, e.g. 12.0")
    p.set_defaults(run=cmd_wheel)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (macho.MachOError, ValueError, OSError) as e:
        print(f"macos_binaries {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
