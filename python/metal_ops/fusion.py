"""Grappler fusion plugin: Conv2D + bias (+ residual add) (+ activation) -> one op.

    import metal_ops
    metal_ops.fusion.enable()        # before the first tf.function runs
    ...
    metal_ops.fusion.report(concrete_function)

`enable()` loads the op library, then the plugin (grappler/fusion_plugin.cc,
built as _metal_ops_grappler.so) through TensorFlow's pluggable-device loader.
The plugin registers a graph optimizer for device type "CPU" only: on macOS
tensorflow-metal owns "GPU" and its own remapper fuses convolutions there; use
metal_ops.fused_conv2d directly to get the MPSGraph fused kernel on the GPU.

Environment: METAL_OPS_FUSION=0 disables it (enable() returns False and an
already loaded plugin stops rewriting); METAL_OPS_FUSION_LOG=1 prints one line
per rewrite; METAL_OPS_FUSION_WITH_ONEDNN=1 lets it rewrite even when
TensorFlow's oneDNN path is on (off by default: oneDNN's convolutions are
faster than the Eigen convolution our kernel is built on, and oneDNN already
fuses the residual add itself). See docs/FUSION.md.
"""
import ctypes
import os
import sys
import threading

from metal_ops import _loader
from metal_ops._loader import PACKAGE_DIR, load_library

PLUGIN_NAME = "_metal_ops_grappler.so"
_lock = threading.Lock()
_enabled = False

# Shared libraries that register a Grappler optimizer for device type "CPU".
# Loading a second one aborts the process inside TensorFlow.
_KNOWN_CPU_PLUGINS = ("itex", "intel_extension_for_tensorflow")


class FusionUnavailableError(RuntimeError):
    """The plugin cannot be loaded safely in this process (reason in the message)."""


def plugin_path():
    return os.path.join(PACKAGE_DIR, PLUGIN_NAME)


def _dlopen_noload(path):
    mode = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
    try:
        return ctypes.CDLL(path, mode=mode)
    except OSError:
        return None


def _our_plugin_init_calls():
    """How often TensorFlow called our TF_InitGraph in this process (0: not loaded)."""
    lib = _dlopen_noload(plugin_path())
    if lib is None:
        return 0
    try:
        return int(lib.MetalOpsFusionInitCalls())
    except AttributeError:
        return 0


def _cpu_optimizer_owner():
    """Who else registered a Grappler optimizer for "CPU" in this process.

    Returns None, ("copy", path, init_calls) for another copy of our own plugin
    (e.g. loaded by TensorFlow from TF_PLUGGABLE_DEVICE_LIBRARY_PATH or
    tensorflow-plugins/), or ("foreign", name) for anything else.
    """
    ours = os.path.realpath(plugin_path())
    for name in _KNOWN_CPU_PLUGINS:
        if name in sys.modules:
            return ("foreign", name)
    candidates = list(_loader.loaded_libraries())
    env = os.environ.get("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", "")
    candidates += [p for p in env.split(os.pathsep) if p]
    try:
        import site

        for d in site.getsitepackages() + [site.getusersitepackages()]:
            pd = os.path.join(d, "tensorflow-plugins")
            if os.path.isdir(pd):
                candidates += [os.path.join(pd, f) for f in os.listdir(pd)]
    except Exception:  # pragma: no cover - best effort discovery
        pass
    for path in candidates:
        if os.path.realpath(path) == ours:
            continue
        base = os.path.basename(path).lower()
        if any(k in base for k in _KNOWN_CPU_PLUGINS):
            return ("foreign", path)
        if sys.platform == "darwin" and "metal" in base and "metal_ops" not in base:
            continue  # tensorflow-metal registers "GPU", not "CPU"
        if base.endswith((".so", ".dylib")) or ".so." in base:
            lib = _dlopen_noload(path)
            if lib is None or not hasattr(lib, "TF_InitGraph"):
                continue
            if hasattr(lib, "MetalOpsFusionInitCalls"):
                calls = int(lib.MetalOpsFusionInitCalls())
                if calls > 0:
                    return ("copy", path, calls)
                continue  # a copy TF never initialised registers nothing
            return ("foreign", path)
    return None


def _other_cpu_optimizer():
    """Name of a foreign library that owns the CPU Grappler optimizer, or None."""
    owner = _cpu_optimizer_owner()
    return owner[1] if owner is not None and owner[0] == "foreign" else None


def is_enabled():
    """True when the plugin is loaded in this process and not disabled by METAL_OPS_FUSION=0."""
    if os.environ.get("METAL_OPS_FUSION", "1") == "0":
        return False
    if _enabled or _our_plugin_init_calls() > 0:
        return True
    owner = _cpu_optimizer_owner()
    return owner is not None and owner[0] == "copy"


def enable():
    """Loads the op library, then the fusion plugin. Returns True when active.

    Idempotent. Returns False (with nothing loaded) when METAL_OPS_FUSION=0.
    Raises FusionUnavailableError, instead of letting TensorFlow abort, when the
    plugin file is missing or another plugin already owns the CPU optimizer.
    Call it before the tf.functions you want rewritten are first traced/run.
    """
    global _enabled
    if os.environ.get("METAL_OPS_FUSION", "1") == "0":
        return False
    with _lock:
        if _enabled or _our_plugin_init_calls() > 0:
            _enabled = True
            return True
        load_library()  # ops first: the plugin writes MetalOpsFusedConv2D nodes
        path = plugin_path()
        if not os.path.exists(path):
            raise FusionUnavailableError(
                f"metal_ops.fusion: plugin not found at {path}; build it with `make`.")
        owner = _cpu_optimizer_owner()
        if owner is not None and owner[0] == "copy":
            # TensorFlow already loaded another copy of this plugin (e.g. from
            # TF_PLUGGABLE_DEVICE_LIBRARY_PATH): it is active and rewrites with
            # the same code; loading ours too would abort TensorFlow.
            _enabled = True
            return True
        other = owner[1] if owner is not None else None
        if other is not None:
            raise FusionUnavailableError(
                f"metal_ops.fusion: another TensorFlow plugin already registers a Grappler "
                f"optimizer for CPU ({other}); TensorFlow aborts when a second one is "
                f"registered, so the metal_ops fusion plugin was not loaded. Use "
                f"metal_ops.fused_conv2d directly, or run without that plugin.")
        from tensorflow.python.framework import load_library as _tf_load

        _tf_load.load_pluggable_device_library(path)
        _enabled = True
    return True


# --------------------------------------------------------------------------------------
# report(): which patterns a tf.function gets fused into.
# --------------------------------------------------------------------------------------
def _optimized_graph_def(concrete_function):
    """Runs Grappler (all default passes + plugins) on the function's graph."""
    from tensorflow.core.protobuf import meta_graph_pb2

    graph = concrete_function.graph
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph.as_graph_def())
    # Grappler's CPU passes (TF's remapper and plugins registered for "CPU")
    # only touch nodes placed on a CPU; at run time the placer has done that.
    for node in meta.graph_def.node:
        if not node.device:
            node.device = "/job:localhost/replica:0/task:0/device:CPU:0"
    fetch = meta.collection_def["train_op"].node_list.value
    for t in concrete_function.outputs:
        fetch.append(t.name)
    for op in graph.get_operations():
        # Variable updates of a training step are side effects, not outputs.
        if op.type in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp") or (
                op.type.startswith("ResourceApply")):
            fetch.append(op.name)
    return _optimize_offline(meta)


# Sequence numbers of the plugin records made by our own offline Grappler runs:
# they are not what ran, so report() never matches them.
_offline_seq_ranges = []


def _last_seq():
    recs = _records()
    return recs[-1]["seq"] if recs else 0


def _optimize_offline(meta_graph):
    """tf_optimizer.OptimizeGraph on `meta_graph`, its plugin records set aside."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    lo = _last_seq()
    try:
        return tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta_graph)
    finally:
        _offline_seq_ranges.append((lo + 1, _last_seq()))


class FusionReport:
    """What fusion did to one function.

    fused: one dict per MetalOpsFusedConv2D (name, pattern, nodes, activation);
    tensorflow: TF's own fused convolutions in the graph the plugin received
    (name, fused_ops); source: "runtime" (recorded by the plugin when the
    function was instantiated) or "offline" (Grappler re-run on the graph,
    used when the function has not run since the plugin was loaded).
    """

    def __init__(self, fused, tensorflow, source):
        self.fused = fused
        self.tensorflow = tensorflow
        self.source = source

    @property
    def patterns(self):
        return [f["pattern"] for f in self.fused]

    def __len__(self):
        return len(self.fused)

    def __repr__(self):
        lines = [f"FusionReport ({self.source}): {len(self.fused)} MetalOpsFusedConv2D, "
                 f"{len(self.tensorflow)} TensorFlow fused convolutions"]
        for f in self.fused:
            lines.append(f"  {f['name']}: {f['pattern']} (activation {f['activation']}; "
                         f"nodes {', '.join(f['nodes'])})")
        for f in self.tensorflow:
            lines.append(f"  {f['name']}: _FusedConv2D{f['fused_ops']} (TensorFlow's, kept)")
        return "\n".join(lines)


def _decode(v):
    return v.decode() if isinstance(v, bytes) else v


def _records():
    """The plugin's per-pass records (see grappler/fusion_plugin.cc), oldest first."""
    lib = _dlopen_noload(plugin_path())
    if lib is None or not hasattr(lib, "MetalOpsFusionRecordsJson"):
        return []
    import json

    fn = lib.MetalOpsFusionRecordsJson
    fn.restype = ctypes.c_char_p
    return json.loads(fn().decode())


# Op types Grappler's own passes put into graphs (constant folding, arithmetic
# and layout optimizers, pruning); never evidence that a record is another function.
_GRAPPLER_OPS = frozenset({"Const", "Identity", "IdentityN", "NoOp", "AddN", "Shape", "ShapeN", "Reshape",
                           "Transpose", "BroadcastTo", "ZerosLike", "OnesLike", "Fill", "Pack", "Snapshot",
                           "ConcatV2", "Mul", "Sub", "Neg", "Square", "Reciprocal"})


def _runtime_report(graph):
    """Matches the function's graph against what the plugin saw at run time."""
    # Outputs become _Retval nodes with other names at run time: leave them out.
    outputs = {t.op.name for t in graph.outputs}
    names = {op.name for op in graph.get_operations() if not (op.type == "Identity" and op.name in outputs)}
    if not names:
        return None
    best, best_score = None, 0.0
    records = [r for r in _records()
               if not any(lo <= r["seq"] <= hi for lo, hi in _offline_seq_ranges)]
    op_types = {op.type for op in graph.get_operations()}

    def ops_fit(rec):
        # Every op type of the record (other than those Grappler introduces)
        # must occur in the function: tells apart look-alike functions (same
        # node names, e.g. Relu vs Relu6 at the end).
        return not any(t not in op_types and t not in _GRAPPLER_OPS and not t.startswith(("_", "MetalOps"))
                       for t in rec.get("ops", ()))

    for i, rec in enumerate(records):
        if not ops_fit(rec):
            continue
        # A record holding our fused nodes (a later pass over a rewritten graph)
        # hides the fused ops' originals: the pass before it must fit too.
        if "MetalOpsFusedConv2D" in rec.get("ops", ()) and not rec["rewrites"] and (
                i == 0 or not ops_fit(records[i - 1])):
            continue
        seen = {n for n in rec["nodes"] if not n.endswith("_RetVal")}
        # Grappler renames / removes some nodes; most names survive. Ties go
        # to the newest record (the function that ran last).
        score = len(names & seen) / len(names | seen)
        if score >= best_score:
            best, best_score = i, score
    if best is None or best_score < 0.25:  # TF renames, folds and prunes many nodes
        return None
    # If the best match is the second meta-optimizer iteration of a graph we
    # rewrote, the rewrites are in the record just before it: that first pass
    # saw (nearly) all of this pass's nodes and put its fused nodes' names here.
    group = [records[best]]
    if best > 0:
        prev, cur = records[best - 1], set(records[best]["nodes"])
        prev_nodes = set(prev["nodes"])
        if (not records[best]["rewrites"] and prev["rewrites"]
                and len(cur & prev_nodes) >= 0.95 * len(cur)
                # each fused node is here, the nodes it replaced are gone
                and all(rw[0] in cur and not (set(rw[3][:-1]) & cur) for rw in prev["rewrites"])):
            group.insert(0, prev)
    fused, tf_fused, seen_fused = [], [], set()
    for rec in group:
        for name, pattern, act, nodes in rec["rewrites"]:
            if name not in seen_fused:
                seen_fused.add(name)
                fused.append({"name": name, "pattern": pattern, "nodes": nodes, "activation": act})
    # TF's fusions as the first pass saw them (before any of ours replaced them).
    for name, ops in group[0]["tf_fused"]:
        if name not in seen_fused:
            tf_fused.append({"name": name, "fused_ops": ops})
    return FusionReport(fused, tf_fused, "runtime")


def report(concrete_function):
    """FusionReport of the patterns fused in `concrete_function`.

    Accepts a ConcreteFunction (or a traced tf.function). After the function
    has run once with the plugin loaded, this is what the plugin recorded for
    its graph at run time. Otherwise Grappler is re-run offline on the graph
    (nothing is executed) -- a prediction: offline Grappler does not always
    take the same decisions as at run time (e.g. oneDNN's own fusions).
    """
    if not hasattr(concrete_function, "graph"):
        concrete_function = concrete_function.get_concrete_function()
    rep = _runtime_report(concrete_function.graph)
    if rep is not None:
        return rep
    gd = _optimized_graph_def(concrete_function)
    nodes = list(gd.node)
    for fn in gd.library.function:
        nodes.extend(fn.node_def)
    fused, tf_fused = [], []
    for n in nodes:
        if n.op == "MetalOpsFusedConv2D":
            fused.append({
                "name": n.name,
                "pattern": _decode(n.attr["_metal_ops_fused_pattern"].s) if "_metal_ops_fused_pattern" in n.attr else "manual",
                "nodes": [_decode(s) for s in n.attr["_metal_ops_fused_nodes"].list.s] if "_metal_ops_fused_nodes" in n.attr else [],
                "activation": _decode(n.attr["activation"].s),
            })
        elif n.op == "_FusedConv2D":
            tf_fused.append({"name": n.name, "fused_ops": [_decode(s) for s in n.attr["fused_ops"].list.s]})
    return FusionReport(fused, tf_fused, "offline")
