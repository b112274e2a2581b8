"""Grappler fusion plugin: Conv2D + bias (+ residual add) (+ activation) -> one op.

    import metal_ops
    metal_ops.fusion.enable()        # before the first tf.function runs
    with metal_ops.fusion.record() as rec:
        train_step(x, y)             # first call: what TensorFlow really ran
    print(rec.report())
    metal_ops.fusion.report(concrete_function)   # offline prediction

`enable()` loads the op library, then the plugin (grappler/fusion_plugin.cc,
built as _metal_ops_grappler.so) through TensorFlow's pluggable-device loader.
The plugin registers a graph optimizer for device type "CPU" only: on macOS
tensorflow-metal owns "GPU" and its own remapper fuses convolutions there; use
metal_ops.fused_conv2d directly to get the MPSGraph fused kernel on the GPU.

Environment: METAL_OPS_FUSION=0 disables it (enable() returns False and an
already loaded plugin stops rewriting); METAL_OPS_FUSION_LOG=1 prints one line
per rewrite; METAL_OPS_FUSION_WITH_ONEDNN=1 lets it rewrite even when
TensorFlow's oneDNN path is on (off by default: oneDNN already fuses the
residual add and the activation itself). See docs/FUSED_CONV2D.md.
"""
import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
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
    """The Grappler plugin of the running TensorFlow's build (the macOS wheel
    has one per TensorFlow: build info "grappler_library")."""
    info = _loader.read_build_info() or {}
    return os.path.join(PACKAGE_DIR, info.get("grappler_library") or PLUGIN_NAME)


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
# report() / record(): what fusion did, read from the graphs TensorFlow optimized. The
# plugin writes on every MetalOpsFusedConv2D node it creates which rule fused it
# (_metal_ops_fused_pattern) and which nodes it replaced (_metal_ops_fused_nodes).
# --------------------------------------------------------------------------------------
PATTERN_ATTR = "_metal_ops_fused_pattern"
NODES_ATTR = "_metal_ops_fused_nodes"


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


def _optimize_offline(meta_graph):
    """TensorFlow's meta-optimizer (Grappler, plugins included) on `meta_graph`."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    return tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta_graph)


class FusionReport:
    """What fusion did to one function (or to the functions run in a record() block).

    fused: one dict per MetalOpsFusedConv2D (name, pattern, nodes, activation),
    read from the node's own attributes; pattern "manual" for one written by
    hand (metal_ops.fused_conv2d). tensorflow: TensorFlow's own fused
    convolutions left in the graph (name, fused_ops). source: "runtime" (the
    graphs TensorFlow ran, from record()) or "offline" (Grappler run on the
    function's graph by report(), nothing executed).
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


def _summarize(graph_defs, source):
    """FusionReport of the fused convolutions in `graph_defs` (and their function libraries)."""
    fused, tf_fused = [], []
    for gd in graph_defs:
        nodes = list(gd.node)
        for fn in gd.library.function:
            nodes.extend(fn.node_def)
        for n in nodes:
            if n.op == "MetalOpsFusedConv2D":
                fused.append({
                    "name": n.name,
                    "pattern": _decode(n.attr[PATTERN_ATTR].s) if PATTERN_ATTR in n.attr else "manual",
                    "nodes": [_decode(s) for s in n.attr[NODES_ATTR].list.s] if NODES_ATTR in n.attr else [],
                    "activation": _decode(n.attr["activation"].s),
                })
            elif n.op == "_FusedConv2D":
                tf_fused.append({"name": n.name, "fused_ops": [_decode(s) for s in n.attr["fused_ops"].list.s]})
    return FusionReport(fused, tf_fused, source)


def report(concrete_function):
    """FusionReport predicted for `concrete_function` (source "offline").

    Accepts a ConcreteFunction (or a traced tf.function). Runs TensorFlow's
    Grappler with the loaded plugins on the function's graph (nothing is
    executed) and reads the fused nodes' attributes. Offline Grappler does not
    always decide as at run time (seen: no oneDNN [BiasAdd, Add, Relu] fusion,
    no AddN regrouping offline); record() reports what really ran.
    """
    if not hasattr(concrete_function, "graph"):
        concrete_function = concrete_function.get_concrete_function()
    return _summarize([_optimized_graph_def(concrete_function)], "offline")


class Recording:
    """The graphs TensorFlow optimized and ran inside a record() block."""

    def __init__(self):
        self.graphs = []  # GraphDefs after Grappler, one per function instantiated

    def report(self):
        """FusionReport of every graph recorded (source "runtime")."""
        return _summarize(self.graphs, "runtime")


def _post_optimization_graphs(logdir):
    """The post-Grappler graphs in the graph_run_metadata summaries under logdir."""
    import glob

    import tensorflow as tf

    graphs = []
    for path in sorted(glob.glob(os.path.join(logdir, "*"))):
        for raw in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(raw.numpy())
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "graph_run_metadata_graph":
                    continue
                meta = tf.compat.v1.RunMetadata.FromString(tf.make_ndarray(value.tensor).item())
                graphs.extend(fg.post_optimization_graph for fg in meta.function_graphs)
    return graphs


@contextlib.contextmanager
def record():
    """Records the graphs of the tf.functions instantiated (first run) in the block.

        with metal_ops.fusion.record() as rec:
            train_step(x, y)          # its first call: traced, optimized, run
        print(rec.report())

    Uses TensorFlow's graph collection (tf.summary.trace_on(graph=True) /
    trace_export, the route TensorBoard's graph view uses): TensorFlow returns
    each function's graph as Grappler and the plugin left it, and the report is
    read from the fused nodes' attributes. A function already run before the
    block is not instantiated again and is not recorded. Do not nest it in
    another summary trace (trace_export ends that trace too).
    """
    import tensorflow as tf

    rec = Recording()
    logdir = tempfile.mkdtemp(prefix="metal_ops_fusion_")
    try:
        writer = tf.summary.create_file_writer(logdir)
        tf.summary.trace_on(graph=True, profiler=False)
        try:
            yield rec
        finally:
            with writer.as_default():
                tf.summary.trace_export("metal_ops_fusion", step=0)
            writer.close()
        rec.graphs = _post_optimization_graphs(logdir)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
