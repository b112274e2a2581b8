"""plugin-compat: whether dyld can load tensorflow-metal's plugin into each
TensorFlow (an unpacked wheel's `tensorflow/` folder).

The plugin binds some TensorFlow symbols two-level to the library it links
(`@rpath/_pywrap_tensorflow_internal.so`) and the rest through the flat
namespace (it was linked with `-undefined dynamic_lookup`). TensorFlow loads
`tensorflow-plugins/` at `import tensorflow` without catching errors, so a
plugin dyld refuses breaks the import. Model of dyld (not run here): an
`@rpath/` dependency resolves to an already-loaded image with that install
name, else through the plugin's LC_RPATHs in the installed layout; a two-level
bind must be exported (or re-exported) by that library; a flat bind by any
TensorFlow image `import tensorflow` has loaded. Missing non-lazy binds make
dyld refuse the plugin, missing lazy ones fail at their first call; weak
imports may be missing.
"""
import os
import re

from .macho import ORDINAL_FLAT


def locate_dependency(plugin, path, tf):
    """(rel in tf.images or None, how): where dyld finds a dependency of the
    plugin, installed as site-packages/tensorflow-plugins/ beside tensorflow/."""
    rel = tf.by_install_name(path)
    if rel is not None:
        return rel, f"the loaded image with install name {path}"
    if path.startswith("@rpath/"):
        plugin_dir = os.path.join(os.path.dirname(os.path.abspath(tf.dir)), "tensorflow-plugins")
        for rpath in plugin.rpaths:
            if not rpath.startswith("@loader_path"):
                continue  # absolute or @executable_path: outside any installed wheel
            candidate = os.path.normpath(os.path.join(plugin_dir + rpath[len("@loader_path"):],
                                                      path[len("@rpath/"):]))
            for rel in tf.images:
                if os.path.normpath(os.path.join(os.path.abspath(tf.dir), rel)) == candidate:
                    return rel, f"LC_RPATH {rpath}"
    return None, None


def tensorflow_dependencies(plugin):
    """(ordinal, path) of the plugin's load commands that are not system libraries."""
    return [(i, path) for i, (_, path) in enumerate(plugin.dylibs, 1)
            if not path.startswith(("/usr/lib/", "/System/"))]


TF_SYMBOL = re.compile(r"_(TF|TFE|TSL|SP)_"  # the C APIs
                       r"|__Z(T[VIST])?N?[KVr]*\d+(tensorflow|tsl|google|absl|xla|stream_executor|Eigen)")


def is_tensorflow_symbol(symbol):
    """Flat binds the TensorFlow images must provide: TensorFlow's C APIs and
    C++ (with the protobuf, Abseil and Eigen it bundles). The rest, e.g.
    `_objc_msgSend`, come from system libraries this check cannot see."""
    return TF_SYMBOL.match(symbol) is not None


def kinds(binds):
    lazy = sum(b.lazy for b in binds)
    return f"{len(binds) - lazy} non-lazy, {lazy} lazy"


class Compat:
    """The outcome of loading the plugin into one TensorFlow: `lines` say what
    was checked, `problems` why dyld would refuse the plugin or a call fail."""

    def __init__(self, version):
        self.version = version
        self.lines, self.problems = [], []
        self.bound = self.resolved = 0
        self.missing = []  # symbols

    @property
    def loads(self):
        return not self.problems

    def count(self, binds, missing):
        self.bound += len(binds)
        self.resolved += len(binds) - len(missing)
        self.missing += [b.symbol for b in missing]


def check_plugin_compat(plugin, tf):
    result = Compat(tf.version)
    binds = plugin.binds()
    for ordinal, path in tensorflow_dependencies(plugin):
        wanted = [b for b in binds if b.ordinal == ordinal]
        rel, how = locate_dependency(plugin, path, tf)
        if rel is None:
            names = "; ".join(f"{r} is {tf.images[r].install_name}" for r in tf.images)
            result.problems.append(f"dyld cannot find {path}: no loaded image has that install name ({names}) "
                                   f"and the plugin's LC_RPATHs ({', '.join(plugin.rpaths) or 'none'}) "
                                   "lead to no file of the wheel")
            # Still say whether that file would have done, for the record.
            rel, how = tf.dependency(path), "NOT FOUND by dyld; checked against the file of that name"
        if rel is None:
            result.lines.append(f"{path} ({len(wanted)} binds): NOT FOUND, and no file of that name")
            result.count(wanted, [b for b in wanted if not b.weak_import])
            continue
        missing = [b for b in wanted if not b.weak_import and not tf.resolve(rel, b.symbol)]
        result.count(wanted, missing)
        result.lines.append(f"{path} -> {rel} ({how}): exports {len(wanted) - len(missing)} of the "
                            f"{len(wanted)} symbols bound to it ({kinds(wanted)})")
        if missing:
            result.problems.append(f"{len(missing)} symbols bound two-level to {path} are not exported by "
                                   f"{rel} ({kinds(missing)}): {', '.join(b.symbol for b in missing[:3])} ...")
            elsewhere = sorted({r for b in missing for r in tf.exporters(b.symbol)})
            if elsewhere:
                result.lines.append(f"  (some of them are exported by {', '.join(elsewhere)}: "
                                    "the plugin would need relinking against those)")
    flat = [b for b in binds if b.ordinal == ORDINAL_FLAT]
    ours = [b for b in flat if is_tensorflow_symbol(b.symbol)]
    missing = [b for b in ours if not b.weak_import and not tf.exporters(b.symbol)]
    result.count(ours, missing)
    others = sorted({b.symbol for b in flat} - {b.symbol for b in ours})
    result.lines.append(f"flat namespace: {len(ours) - len(missing)} of {len(ours)} TensorFlow symbols "
                        f"({kinds(ours)}) exported by a TensorFlow image"
                        + (f"; left to the system: {', '.join(others)}" if others else ""))
    if missing:
        result.problems.append(f"{len(missing)} symbols bound through the flat namespace are exported by no "
                               f"TensorFlow image ({kinds(missing)}): "
                               f"{', '.join(b.symbol for b in missing[:3])} ...")
    return result
