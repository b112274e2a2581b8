"""Grappler fusion plugin (grappler/fusion_plugin.cc, metal_ops.fusion).

The plugin changes process-wide Grappler state, so every case runs in a child
process (this file, run as a script), grouped so that TensorFlow is imported
only a few times:

  child "table"  : plugin on; the pattern table, negative cases, idempotency,
                   the Keras ResNet blocks (outputs + one training step's
                   gradients saved to an .npz)
  child "keras"  : plugin NOT loaded; the same Keras models, for comparison
  child "guards" : METAL_OPS_FUSION=0, a foreign CPU plugin, enable() twice

each with oneDNN on (TF's default here) and with TF_ENABLE_ONEDNN_OPTS=0, plus
one "table" child with oneDNN on and METAL_OPS_FUSION_WITH_ONEDNN=1 (the pass
may rewrite next to oneDNN, and must still keep TF's own fusions).

Tolerances: the fused op and TF's convolution both accumulate in float32 over
at most 3*3*8 taps; fused vs unfused results agree to 1e-5 absolute (values
are O(1)); Keras gradients through 2 blocks to 1e-4 (relative 1e-4).
"""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.reference import keras_resnet
from tests.child_env import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATOL = 1e-5

# name -> (expected fused pattern with oneDNN off, or None for "left unchanged")
POSITIVE = {
    "bias_residual_relu": "_FusedConv2D[BiasAdd]+AddV2(residual)+Relu",
    "bias_residual_first_relu": "_FusedConv2D[BiasAdd]+AddV2(residual)+Relu",
    "bias_add_v1_residual": "_FusedConv2D[BiasAdd]+Add(residual)",
    "addbias_residual_relu6": "Conv2D+AddN(residual)+AddV2+Relu6",  # TF regroups (conv + b) + r
    "bias_residual_elu": "_FusedConv2D[BiasAdd]+AddV2(residual)+Elu",
    "bias_residual_leaky": "_FusedConv2D[BiasAdd]+AddV2(residual)+LeakyRelu",
    "bias_residual_leaky03": "_FusedConv2D[BiasAdd]+AddV2(residual)+LeakyRelu",
    "bias_residual_sigmoid": "_FusedConv2D[BiasAdd]+AddV2(residual)+Sigmoid",
    "bias_residual_tanh": "_FusedConv2D[BiasAdd]+AddV2(residual)+Tanh",
    "bias_sigmoid": "_FusedConv2D[BiasAdd]+Sigmoid",
    "bias_tanh": "_FusedConv2D[BiasAdd]+Tanh",
    "nobias_residual_relu": "Conv2D+AddV2(residual)+Relu",
    "nobias_relu": "Conv2D+Relu",
    "strided_valid": "_FusedConv2D[BiasAdd]+AddV2(residual)+Relu",
    "explicit_padding": "_FusedConv2D[BiasAdd]+AddV2(residual)+Relu",
    "dilated": "_FusedConv2D[BiasAdd]+AddV2(residual)+Relu",
    "one_by_one": "_FusedConv2D[BiasAdd]+AddV2(residual)+Relu",
}
NEGATIVE = ["fanout", "intermediate_fetched", "control_dependency", "broadcast_residual",
            "float64", "nchw", "bias_relu_tf_fused"]


# ----------------------------------------------------------------------------------
# Child side
# ----------------------------------------------------------------------------------
def _cases(tf):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 8, 4)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 4, 4)) / 6).astype(np.float32)
    w1 = (rng.standard_normal((1, 1, 4, 4)) / 2).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    r = rng.standard_normal((2, 8, 8, 4)).astype(np.float32)
    r4 = rng.standard_normal((2, 4, 3, 4)).astype(np.float32)
    conv = lambda x, w, **kw: tf.nn.conv2d(x, w, kw.get("s", 1), kw.get("p", "SAME"), dilations=kw.get("d", 1))
    nn = tf.nn
    c = {}
    c["bias_residual_relu"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w), b) + r), (x, w, b, r))
    c["bias_residual_first_relu"] = (lambda x, w, b, r: nn.relu(r + nn.bias_add(conv(x, w), b)), (x, w, b, r))
    c["bias_add_v1_residual"] = (lambda x, w, b, r: tf.raw_ops.Add(x=nn.bias_add(conv(x, w), b), y=r) * 1.0, (x, w, b, r))
    c["addbias_residual_relu6"] = (lambda x, w, b, r: nn.relu6((conv(x, w) + b) + r), (x, w, b, r))
    c["bias_residual_elu"] = (lambda x, w, b, r: nn.elu(nn.bias_add(conv(x, w), b) + r), (x, w, b, r))
    c["bias_residual_leaky"] = (lambda x, w, b, r: nn.leaky_relu(nn.bias_add(conv(x, w), b) + r), (x, w, b, r))
    c["bias_residual_leaky03"] = (lambda x, w, b, r: nn.leaky_relu(nn.bias_add(conv(x, w), b) + r, 0.3), (x, w, b, r))
    c["bias_residual_sigmoid"] = (lambda x, w, b, r: tf.sigmoid(nn.bias_add(conv(x, w), b) + r), (x, w, b, r))
    c["bias_residual_tanh"] = (lambda x, w, b, r: tf.tanh(nn.bias_add(conv(x, w), b) + r), (x, w, b, r))
    c["bias_sigmoid"] = (lambda x, w, b: tf.sigmoid(nn.bias_add(conv(x, w), b)), (x, w, b))
    c["bias_tanh"] = (lambda x, w, b: tf.tanh(nn.bias_add(conv(x, w), b)), (x, w, b))
    c["nobias_residual_relu"] = (lambda x, w, r: nn.relu(conv(x, w) + r), (x, w, r))
    c["nobias_relu"] = (lambda x, w: nn.relu(conv(x, w)), (x, w))
    c["strided_valid"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w, s=[2, 3], p="VALID"), b) + r),
                          (x, w, b, r[:, :3, :2, :]))
    c["explicit_padding"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w, s=2, p=[[0, 0], [1, 0], [0, 1], [0, 0]]), b) + r),
                             (x, w, b, r4[:, :4, :4, :] if False else rng.standard_normal((2, 4, 4, 4)).astype(np.float32)))
    c["dilated"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w, d=2), b) + r), (x, w, b, r))
    c["one_by_one"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w), b) + r), (x, w1, b, r))
    # Negative cases: the plugin must leave these graphs as TF made them.
    c["fanout"] = (lambda x, w, b, r: (lambda y: nn.relu(y + r) + 2.0 * y)(nn.bias_add(conv(x, w), b)), (x, w, b, r))

    def fetched(x, w, b, r):
        y = nn.bias_add(conv(x, w), b)  # an intermediate of the pattern, also returned
        return nn.relu(y + r), y
    c["intermediate_fetched"] = (fetched, (x, w, b, r))

    def control(x, w, b, r):
        y = nn.bias_add(conv(x, w), b)
        check = tf.debugging.assert_greater(tf.reduce_sum(x * x), -1.0)  # stateful: never pruned
        with tf.control_dependencies([check]):
            z = y + r
        return nn.relu(z)
    c["control_dependency"] = (control, (x, w, b, r))
    c["broadcast_residual"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w), b) + r[:1, :, :, :1]), (x, w, b, r))
    c["float64"] = (lambda x, w, b, r: nn.relu(nn.bias_add(conv(x, w), b) + r),
                    tuple(a.astype(np.float64) for a in (x, w, b, r)))
    # NCHW: TF's CPU Conv2D runs it only through oneDNN; with oneDNN off both
    # eager and graph raise the same UnimplementedError (compared as equal).
    xc = np.transpose(x, (0, 3, 1, 2)).copy()
    rc = np.transpose(r, (0, 3, 1, 2)).copy()
    c["nchw"] = (lambda x, w, b, r: nn.relu(nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME", data_format="NCHW"), b,
                                                        data_format="NCHW") + r), (xc, w1, b, rc))
    c["bias_relu_tf_fused"] = (lambda x, w, b: nn.relu(nn.bias_add(conv(x, w), b)), (x, w, b))
    return c


def _keras_models(tf):
    """ResNet identity / conv blocks of seed 003 (NHWC). BatchNorm folded into the
    convolutions' bias (as at inference), which is the Conv2D -> BiasAdd ->
    (Add) -> Relu graph the plugin fuses; one model keeps BatchNormalization to
    show a graph the plugin leaves alone still gives the same numbers."""
    keras = tf.keras
    L = keras.layers
    models = {}
    for bn in (False, True):
        keras.utils.set_random_seed(1234)
        inp = keras.Input(shape=(12, 12, 8), batch_size=2)
        res_conv, res_identity = keras_resnet.blocks(keras, bn)
        x = res_conv(inp, 1, (4, 8))
        x = res_identity(x, (4, 8))
        x = L.GlobalAveragePooling2D()(x)
        out = L.Dense(3)(x)
        models["bn" if bn else "bias"] = keras.Model(inp, out)
    return models


def _run_keras(tf, out_path):
    models = _keras_models(tf)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 12, 12, 8)).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    results, patterns = {}, {}
    from metal_ops import fusion
    for name, model in models.items():
        infer = tf.function(lambda x: model(x, training=False))
        with fusion.record() as rec_infer:
            results[f"{name}_infer"] = infer(x).numpy()

        @tf.function
        def grads(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            return tape.gradient(loss, model.trainable_variables)

        with fusion.record() as rec_train:
            for i, g in enumerate(grads(x, y)):
                results[f"{name}_grad{i}"] = g.numpy()
        if fusion.is_enabled():
            patterns[f"{name}_infer"] = rec_infer.report().patterns
            patterns[f"{name}_train"] = rec_train.report().patterns
    np.savez(out_path, **results)
    return patterns


def _child_table(out_dir):
    import tensorflow as tf
    import metal_ops
    from metal_ops import fusion

    assert fusion.enable() is True
    assert fusion.enable() is True  # twice is harmless
    assert fusion.is_enabled()
    lib = fusion._dlopen_noload(fusion.plugin_path())
    rewrites = lambda: int(lib.MetalOpsFusionRewriteCount())
    lib.MetalOpsFusionRewriteCount.restype = __import__("ctypes").c_long
    out = {"cases": {}}
    def outcome(call):
        try:
            y = call()
            return (y if isinstance(y, tuple) else (y,)), None
        except tf.errors.UnimplementedError as e:
            return None, type(e).__name__

    for name, (fn, args) in _cases(tf).items():
        eager, eager_err = outcome(lambda: fn(*args))
        f = tf.function(fn)
        before = rewrites()
        with fusion.record() as rec:
            graph, graph_err = outcome(lambda: f(*args))
        runtime_rewrites = rewrites() - before
        if eager_err or graph_err:
            diff = 0.0 if eager_err == graph_err else float("inf")
        else:
            diff = max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(eager, graph))
        rep = rec.report()
        offline = fusion.report(f.get_concrete_function(*args))
        # Idempotency: run the optimizer again on the optimized graph.
        from tensorflow.core.protobuf import meta_graph_pb2
        cf = f.get_concrete_function(*args)
        once = fusion._optimized_graph_def(cf)
        meta = meta_graph_pb2.MetaGraphDef()
        meta.graph_def.CopyFrom(once)
        for t in cf.outputs:
            meta.collection_def["train_op"].node_list.value.append(t.name)
        twice = fusion._optimize_offline(meta)
        sig = lambda gd: sorted((n.name, tuple(n.input), n.attr["activation"].s.decode())
                                for n in gd.node if n.op == "MetalOpsFusedConv2D")
        out["cases"][name] = {
            "diff": diff,
            "patterns": rep.patterns,
            "source": rep.source,
            "fused": rep.fused,
            "offline_patterns": offline.patterns,
            "tf_fused": [t["fused_ops"] for t in rep.tensorflow],
            "runtime_rewrites": runtime_rewrites,
            "idempotent": sig(once) == sig(twice),
        }
    out["keras_patterns"] = _run_keras(tf, os.path.join(out_dir, "keras.npz"))
    out["onednn"] = _tf_onednn_on()
    out["plugin_onednn"] = bool(lib.MetalOpsFusionOneDnnOn())
    return out


def _tf_onednn_on():
    """TensorFlow's own answer (a private helper, used only to check the plugin's)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def _child_keras(out_dir):
    import tensorflow as tf
    _run_keras(tf, os.path.join(out_dir, "keras.npz"))
    return {}


def _child_guards(out_dir):
    import tensorflow as tf
    import metal_ops
    from metal_ops import fusion

    res = {}
    os.environ["METAL_OPS_FUSION"] = "0"
    res["disabled_enable"] = fusion.enable()
    res["disabled_is_enabled"] = fusion.is_enabled()
    del os.environ["METAL_OPS_FUSION"]
    sys.modules["intel_extension_for_tensorflow"] = type(sys)("intel_extension_for_tensorflow")
    try:
        fusion.enable()
        res["foreign"] = "loaded"
    except fusion.FusionUnavailableError as e:
        res["foreign"] = str(e)
    del sys.modules["intel_extension_for_tensorflow"]
    res["loaded_after_refusal"] = fusion.is_enabled()
    res["enable"] = fusion.enable()
    res["enable_again"] = fusion.enable()
    lib = fusion._dlopen_noload(fusion.plugin_path())
    res["init_calls"] = int(lib.MetalOpsFusionInitCalls())
    # Default profitability rule (oneDNN off here): a GEMM tile that fits in L2
    # and a filter matrix [KH*KW*Cin, Cout] no taller than wide: 1x1 4 -> 4 and
    # 1x1 4 -> 16 are fused; 1x1 16 -> 4, 3x3 4 -> 4 (36 > 4) and 3x3 256 -> 256
    # (2.4 MB) are not.
    rng = np.random.default_rng(3)
    for name, k, c, co in (("1x1", 1, 4, 4), ("1x1_widening", 1, 4, 16), ("1x1_narrowing", 1, 16, 4),
                           ("3x3", 3, 4, 4), ("3x3_large", 3, 256, 256)):
        x = rng.standard_normal((2, 6, 6, c)).astype(np.float32)
        b = rng.standard_normal(co).astype(np.float32)
        r = rng.standard_normal((2, 6, 6, co)).astype(np.float32)
        w = (rng.standard_normal((k, k, c, co)) / np.sqrt(k * k * c)).astype(np.float32)
        f = tf.function(lambda x, w, b, r: tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b) + r))
        with fusion.record() as rec:
            y = f(x, w, b, r)
        want = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b) + r)
        rep = rec.report()
        res[f"default_{name}"] = {"patterns": rep.patterns, "source": rep.source,
                                  "diff": float(np.max(np.abs(y.numpy() - want.numpy())))}
    # A function run before the record() block is not instantiated again: not recorded.
    with fusion.record() as rec:
        f(x, w, b, r)
    res["rerun_patterns"] = rec.report().patterns
    # A fused_conv2d written by hand reports as "manual".
    h = tf.function(lambda x, w: metal_ops.fused_conv2d(x, w, activation="relu"))
    with fusion.record() as rec:
        h(x, w)
    res["manual"] = rec.report().patterns
    # A function that never ran: report() predicts offline, nothing is executed.
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    r = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    w = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    g = tf.function(lambda x, w, b, r: tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b) + r))
    rep = fusion.report(g.get_concrete_function(x, w, b, r))
    res["offline"] = {"patterns": rep.patterns, "source": rep.source, "repr": repr(rep)}
    return res


def _child_onednn_state(out_dir):
    from metal_ops import fusion

    fusion.enable()
    lib = fusion._dlopen_noload(fusion.plugin_path())
    return {"onednn": _tf_onednn_on(), "plugin_onednn": bool(lib.MetalOpsFusionOneDnnOn())}


def _child_gpu(out_dir, fused):
    import tensorflow as tf
    from metal_ops import fusion

    if fused:
        assert fusion.enable()
    return {"patterns": _run_keras(tf, os.path.join(out_dir, "keras.npz"))}


def _child_main(kind, out_dir):
    import tensorflow as tf

    # The pass rewrites CPU graphs (a GPU's convolutions are left to TensorFlow:
    # test_gpu_graphs_left_on_the_gpu): the other children place theirs on the CPU.
    with tf.device("/GPU:0" if kind.startswith("gpu_") else "/CPU:0"):
        result = {"table": _child_table, "keras": _child_keras, "guards": _child_guards,
                  "onednn_state": _child_onednn_state, "gpu_fused": lambda d: _child_gpu(d, True),
                  "gpu_plain": lambda d: _child_gpu(d, False)}[kind](out_dir)
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------------
# Parent side (pytest)
# ----------------------------------------------------------------------------------
def _start_child(kind, out_dir, onednn, extra_env=None):
    env = child_env(pythonpath=[os.path.join(ROOT, "python"), ROOT])
    env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    if isinstance(onednn, str):  # the variable's raw value; "" leaves it unset
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
        if not onednn:
            del env["TF_ENABLE_ONEDNN_OPTS"]
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    for k in ("METAL_OPS_FUSION", "METAL_OPS_FUSION_LOG", "METAL_OPS_FUSION_WITH_ONEDNN",
              "METAL_OPS_FUSION_ALL_CONVS"):
        env.pop(k, None)
    env.update(extra_env or {})
    out_dir.mkdir()
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), kind, str(out_dir)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs the children, three at a time (TensorFlow's import is mostly serial)."""
    tmp = tmp_path_factory.mktemp("fusion")
    specs = [
        (("table", False), "table", False, {"METAL_OPS_FUSION_LOG": "1", "METAL_OPS_FUSION_ALL_CONVS": "1"}),
        (("keras", False), "keras", False, None),
        (("table", True), "table", True, {"METAL_OPS_FUSION_LOG": "1", "METAL_OPS_FUSION_ALL_CONVS": "1"}),
        (("keras", True), "keras", True, None),
        (("table_with_onednn", True), "table", True, {"METAL_OPS_FUSION_WITH_ONEDNN": "1",
                                                      "METAL_OPS_FUSION_ALL_CONVS": "1"}),
        (("guards", False), "guards", False, None),
        (("onednn_state", "unset"), "onednn_state", "", None),
        (("onednn_state", "False"), "onednn_state", "False", None),
        (("onednn_state", "true"), "onednn_state", "true", None),
    ]
    results, pending = {}, list(enumerate(specs))
    running = []
    while pending or running:
        while pending and len(running) < 3:
            i, (key, kind, onednn, extra) = pending.pop(0)
            out_dir = tmp / f"child{i}_{kind}"
            running.append((key, kind, out_dir, _start_child(kind, out_dir, onednn, extra)))
        key, kind, out_dir, proc = running.pop(0)
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"child {key} failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
        with open(out_dir / "result.json") as f:
            results[key] = (json.load(f), out_dir, stderr)
    return results


def _tf_leaky_alpha_bug(case, res):
    """TF 2.21's own oneDNN fusion Conv2D+BiasAdd+Add+LeakyRelu ignores the
    LeakyRelu alpha (always 0.2): seen here, graph vs eager differ by ~0.38 for
    alpha 0.1 / 0.3 and agree for 0.2. Not our rewrite: the plugin leaves it."""
    return (case == "bias_residual_leaky03" and res["patterns"] == []
            and any("LeakyRelu" in ops and "Add" in ops for ops in res["tf_fused"]))


@pytest.mark.parametrize("onednn", [False, True], ids=["onednn_off", "onednn_on"])
@pytest.mark.parametrize("case", list(POSITIVE) + NEGATIVE)
def test_fused_equals_unfused(runs, case, onednn):
    res = runs[("table", onednn)][0]["cases"][case]
    assert res["idempotent"], res
    if res["diff"] > ATOL and _tf_leaky_alpha_bug(case, res):
        pytest.xfail("TensorFlow's oneDNN _FusedConv2D[BiasAdd, Add, LeakyRelu] ignores alpha "
                     f"(graph vs eager max diff {res['diff']:.3f}); our plugin did not touch it")
    assert res["diff"] <= ATOL, res


@pytest.mark.parametrize("case", list(POSITIVE))
def test_pattern_table_onednn_off(runs, case):
    res = runs[("table", False)][0]["cases"][case]
    assert res["patterns"] == [POSITIVE[case]], res
    assert res["source"] == "runtime", res
    assert res["runtime_rewrites"] >= 1, res
    # The fused node keeps the last node's name and lists the nodes it replaced.
    (fused,) = res["fused"]
    assert fused["nodes"][-1] == fused["name"] and len(fused["nodes"]) == POSITIVE[case].count("+") + 1, fused


def test_offline_report_predicts_the_table_onednn_off(runs):
    """report()'s offline Grappler run predicts the same rewrites, except where
    TensorFlow regroups adds only at run time (the AddN pattern)."""
    cases = runs[("table", False)][0]["cases"]
    for case in POSITIVE:
        if "AddN" not in POSITIVE[case]:
            assert cases[case]["offline_patterns"] == [POSITIVE[case]], (case, cases[case])
    for case in NEGATIVE:
        assert cases[case]["offline_patterns"] == [], (case, cases[case])


@pytest.mark.parametrize("mode,onednn", [("table", False), ("table", True), ("table_with_onednn", True),
                                         ("onednn_state", "unset"), ("onednn_state", "False"),
                                         ("onednn_state", "true")])
def test_plugin_onednn_state_agrees_with_tensorflow(runs, mode, onednn):
    """The plugin decides oneDNN's state from TF_ENABLE_ONEDNN_OPTS and TF's
    documented default (no private symbol); it must agree with TensorFlow."""
    out = runs[(mode, onednn)][0]
    assert out["plugin_onednn"] == out["onednn"], out["onednn"]


@pytest.mark.parametrize("case", NEGATIVE)
@pytest.mark.parametrize("mode", ["table", "table_with_onednn"], ids=["default", "with_onednn"])
def test_negative_cases_unchanged(runs, case, mode):
    onednn = mode == "table_with_onednn"
    res = runs[(mode, True if onednn else False)][0]["cases"][case]
    assert res["patterns"] == [], res
    assert res["runtime_rewrites"] == 0, res


def test_onednn_default_leaves_graphs_to_tensorflow(runs):
    out = runs[("table", True)][0]
    if not out["onednn"]:
        pytest.skip("this TensorFlow build has oneDNN off even with TF_ENABLE_ONEDNN_OPTS=1")
    for name, res in out["cases"].items():
        assert res["patterns"] == [] and res["runtime_rewrites"] == 0, (name, res)
    # TF's own oneDNN fusion of the whole pattern is there (and is what runs).
    assert ["BiasAdd", "Add", "Relu"] in out["cases"]["bias_residual_relu"]["tf_fused"]


def test_tf_full_fusion_never_replaced(runs):
    out = runs[("table_with_onednn", True)][0]
    if not out["onednn"]:
        pytest.skip("this TensorFlow build has oneDNN off even with TF_ENABLE_ONEDNN_OPTS=1")
    res = out["cases"]["bias_residual_relu"]
    assert ["BiasAdd", "Add", "Relu"] in res["tf_fused"] and res["patterns"] == [], res
    for name, res in out["cases"].items():
        assert res["idempotent"], (name, res)
        assert res["diff"] <= ATOL or _tf_leaky_alpha_bug(name, res), (name, res)
        # Whatever we fused there started from a TF node with fused_ops [BiasAdd]
        # or from unfused ops, never from one of TF's complete fusions.
        for p in res["patterns"]:
            assert p.startswith("Conv2D") or p.startswith("_FusedConv2D[BiasAdd]+"), (name, p)


def test_rewrite_log_lines(runs):
    stderr = runs[("table", False)][2]
    assert "metal_ops fusion: _FusedConv2D[BiasAdd]+AddV2(residual)+Relu -> MetalOpsFusedConv2D" in stderr
    assert "nodes:" in stderr


@pytest.mark.parametrize("onednn", [False, True], ids=["onednn_off", "onednn_on"])
def test_keras_resnet_blocks_equal(runs, onednn):
    _, on_dir, _ = runs[("table", onednn)]
    _, off_dir, _ = runs[("keras", onednn)]
    on = np.load(on_dir / "keras.npz")
    off = np.load(off_dir / "keras.npz")
    assert sorted(on.files) == sorted(off.files) and len(on.files) > 4
    for k in on.files:
        np.testing.assert_allclose(on[k], off[k], atol=1e-4, rtol=1e-4, err_msg=k)


def test_keras_resnet_blocks_fused_with_onednn_off(runs):
    pats = runs[("table", False)][0]["keras_patterns"]
    # conv block + identity block: each ends in conv -> bias -> add(skip) -> relu.
    assert pats["bias_infer"].count("_FusedConv2D[BiasAdd]+AddV2(residual)+Relu") == 2, pats
    assert any("AddV2(residual)+Relu" in p for p in pats["bias_train"]), pats


def test_guards(runs):
    res = runs[("guards", False)][0]
    assert res["disabled_enable"] is False and res["disabled_is_enabled"] is False
    assert "another TensorFlow plugin already registers a Grappler optimizer for CPU" in res["foreign"]
    assert res["loaded_after_refusal"] is False
    assert res["enable"] is True and res["enable_again"] is True
    assert res["init_calls"] == 1
    fused = ["_FusedConv2D[BiasAdd]+AddV2(residual)+Relu"]
    for name in ("1x1", "1x1_widening"):
        assert res[f"default_{name}"]["patterns"] == fused, res
    for name in ("1x1_narrowing", "3x3", "3x3_large"):
        assert res[f"default_{name}"]["patterns"] == [], res
    for name in ("1x1", "1x1_widening", "1x1_narrowing", "3x3", "3x3_large"):
        assert res[f"default_{name}"]["diff"] <= ATOL, res
        assert res[f"default_{name}"]["source"] == "runtime", res
    assert res["rerun_patterns"] == [], res
    assert res["manual"] == ["manual"], res
    assert res["offline"]["source"] == "offline", res
    assert res["offline"]["patterns"] == ["_FusedConv2D[BiasAdd]+AddV2(residual)+Relu6"], res
    assert "MetalOpsFusedConv2D" in res["offline"]["repr"], res


def test_gpu_graphs_left_on_the_gpu(tmp_path):
    """The Keras ResNet blocks placed on the GPU with the pass enabled (every
    filter size): no node is rewritten, so no convolution moves to the CPU
    kernel, and the results equal the same models without the plugin."""
    import tensorflow as tf

    if not tf.config.list_logical_devices("GPU"):
        pytest.skip("needs a GPU (CUDA or Metal)")
    procs = {kind: _start_child(kind, tmp_path / kind, False, {"METAL_OPS_FUSION_ALL_CONVS": "1"})
             for kind in ("gpu_fused", "gpu_plain")}
    res = {}
    for kind, proc in procs.items():
        _, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        with open(tmp_path / kind / "result.json") as f:
            res[kind] = json.load(f)
    assert res["gpu_fused"]["patterns"] and all(p == [] for p in res["gpu_fused"]["patterns"].values()), res
    fused, plain = np.load(tmp_path / "gpu_fused" / "keras.npz"), np.load(tmp_path / "gpu_plain" / "keras.npz")
    assert sorted(fused.files) == sorted(plain.files)
    for k in fused.files:  # two processes: cuDNN may pick other algorithms in each
        np.testing.assert_allclose(fused[k], plain[k], rtol=1e-5, atol=1e-6, err_msg=k)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
