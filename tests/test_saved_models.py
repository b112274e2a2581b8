"""Every layer and loss saved, then reloaded in a fresh process: identical
outputs. Formats: Keras 3 `.keras` files, SavedModels exported from the Keras
models (`model.export`), and a `tf.saved_model.save`d tf.Module that calls
every op (forward and gradients) from its signatures.

Children: "save" writes the models and the expected outputs; then "load"
(imports metal_ops, loads everything) and "bare" (does NOT import metal_ops:
the errors must name what is missing) run side by side.

Loading a SavedModel needs the op library loaded first: `import metal_ops`
loads it where the build has XLA kernels, on macOS only at the first op call,
so call metal_ops.load_library() before tf.saved_model.load
(docs/RELIABILITY.md); without the library ("bare") TensorFlow says
"Op type not registered 'MetalOps...'", which the test checks.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorflow as tf

import metal_ops
from tests.child_env import child_env

pytestmark = pytest.mark.every_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HASH = dict(num_levels=4, log2_hashmap_size=10, base_resolution=4, per_level_scale=1.5)


def _data():
    rng = np.random.default_rng(7)
    f32 = np.float32
    return {
        "points": rng.uniform(-0.1, 1.1, size=(32, 3)).astype(f32),
        "residual": rng.normal(size=(32, 3)).astype(f32),
        "weights": rng.uniform(0, 1, size=(8, 12)).astype(f32),
        "t": (2 + np.cumsum(rng.uniform(0, 0.2, size=(8, 13)), axis=1)).astype(f32),
        "sigma": rng.uniform(0, 3, size=(8, 12)).astype(f32),
        "rgb": rng.uniform(0, 1, size=(8, 12, 3)).astype(f32),
        "image": rng.normal(size=(1, 6, 6, 4)).astype(f32),
        "filters": rng.normal(size=(3, 3, 4, 5)).astype(f32),
        "bias": rng.normal(size=(5,)).astype(f32),
        "y_true": rng.normal(size=(32, 3)).astype(f32),
    }


def _keras_models(keras):
    from metal_ops import layers, losses

    pts = keras.Input((3,), name="points")
    a = layers.HashEncoding(num_levels=4, log2_hashmap_size=10, base_resolution=4, finest_resolution=32)(pts)
    b = layers.HashEncoding(num_levels=2, features_per_level=4, log2_hashmap_size=8, base_resolution=2,
                            per_level_scale=2.0, interpolation="smoothstep", out_of_range="zero",
                            table_dtype="float16")(pts)
    hash_model = keras.Model(pts, keras.layers.Dense(2)(keras.layers.Concatenate()([a, keras.layers.Activation(
        "linear", dtype="float32")(b)])))

    res = keras.Input((3,), name="residual")
    adaptive = keras.Model(res, losses.AdaptiveRobustLoss(num_channels=3, alpha_init=0.7, scale_init=0.5,
                                                           reduction="none")(res))

    w = keras.Input((12,), name="weights")
    t = keras.Input((13,), name="t")
    distortion = keras.Model([w, t], losses.DistortionLoss(multiplier=0.5)(w, t))

    x = keras.Input((3,), name="x")
    compiled = keras.Model(x, keras.layers.Dense(3)(x))
    compiled.compile(optimizer="adam", loss=losses.RobustLoss(alpha=[2.0, 0.0, -2.0], scale=[0.5, 1.0, 2.0]))
    return {"hash": hash_model, "adaptive": adaptive, "distortion": distortion, "compiled": compiled}


def _keras_outputs(models, d):
    out = {
        "hash": models["hash"](d["points"]),
        "adaptive": models["adaptive"](d["residual"]),
        "distortion": models["distortion"]([d["weights"], d["t"]]),
        "compiled": models["compiled"](d["residual"]),
        "compiled_loss": models["compiled"].loss(d["y_true"], models["compiled"](d["residual"])),
    }
    return {k: np.asarray(v) for k, v in out.items()}


def _ops_module(tf):
    class AllOps(tf.Module):
        def __init__(self):
            super().__init__()
            rows = metal_ops.hash_grid_size(3, **HASH)
            self.table = tf.Variable(np.random.default_rng(3).normal(size=(rows, 2)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 3], tf.float32),
                                      tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.float32),
                                      tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None, 3], tf.float32),
                                      tf.TensorSpec([None, None, None, 4], tf.float32),
                                      tf.TensorSpec([3, 3, 4, 5], tf.float32), tf.TensorSpec([5], tf.float32)])
        def run(self, points, residual, weights, t, sigma, rgb, image, filters, bias):
            with tf.GradientTape() as tape:
                tape.watch([points, residual, sigma, rgb, image, filters])
                enc = metal_ops.hash_encode(points, self.table, **HASH)
                rho = metal_ops.robust_loss(residual, 1.0, 0.5)
                dist = metal_ops.distortion_loss(weights, t)
                vr = metal_ops.volume_render(sigma, rgb, t, background=[1.0, 1.0, 1.0])
                conv = metal_ops.fused_conv2d(image, filters, bias=bias, activation="elu")
                zo = metal_ops.zero_out(residual, preserve_index=4)
                total = (tf.reduce_sum(tf.sin(enc)) + tf.reduce_sum(rho) + tf.reduce_sum(dist) +
                         tf.reduce_sum(vr.rgb * vr.rgb) + tf.reduce_sum(conv * conv) + tf.reduce_sum(zo))
            grads = tape.gradient(total, [points, self.table, residual, sigma, rgb, image, filters])
            return {"enc": enc, "rho": rho, "dist": dist, "vr_rgb": vr.rgb, "vr_depth": vr.depth, "conv": conv,
                    "zero_out": zo, "g_points": grads[0], "g_table": tf.convert_to_tensor(grads[1]),
                    "g_residual": grads[2], "g_sigma": grads[3], "g_rgb": grads[4], "g_image": grads[5],
                    "g_filters": grads[6]}

    return AllOps()


def _module_args(d):
    return [d[k] for k in ("points", "residual", "weights", "t", "sigma", "rgb", "image", "filters", "bias")]


# ----------------------------------------------------------------------------- children
def _child_save(out):
    import keras
    import tensorflow as tf

    d = _data()
    models = _keras_models(keras)
    expected = {f"keras_{k}": v for k, v in _keras_outputs(models, d).items()}
    for name, model in models.items():
        model.save(os.path.join(out, f"{name}.keras"))
        if name != "compiled":
            model.export(os.path.join(out, f"{name}_savedmodel"), verbose=False)
    # What the exported graphs serve in the saving process (graph mode may
    # differ from eager Keras in the last bit: Grappler rewrites TF's own ops).
    feeds = {"hash": [d["points"]], "adaptive": [d["residual"]], "distortion": [d["weights"], d["t"]]}
    for name, args in feeds.items():
        sm = tf.saved_model.load(os.path.join(out, f"{name}_savedmodel"))
        expected[f"exported_{name}"] = np.asarray(sm.serve(*args) if len(args) == 1 else sm.serve(args))
    module = _ops_module(tf)
    expected.update({f"ops_{k}": v.numpy() for k, v in module.run(*_module_args(d)).items()})
    tf.saved_model.save(module, os.path.join(out, "ops_savedmodel"))
    np.savez(os.path.join(out, "expected.npz"), **expected)
    return {"saved": sorted(os.listdir(out))}


def _child_load(out):
    import keras
    import tensorflow as tf

    metal_ops.load_library()  # SavedModels: ops must be registered before loading
    d = _data()
    got = {}
    models = {n: keras.saving.load_model(os.path.join(out, f"{n}.keras"))
              for n in ("hash", "adaptive", "distortion", "compiled")}
    got.update({f"keras_{k}": v for k, v in _keras_outputs(models, d).items()})
    feeds = {"hash": [d["points"]], "adaptive": [d["residual"]], "distortion": [d["weights"], d["t"]]}
    for name, args in feeds.items():
        sm = tf.saved_model.load(os.path.join(out, f"{name}_savedmodel"))
        got[f"exported_{name}"] = np.asarray(sm.serve(*args) if len(args) == 1 else sm.serve(args))
    module = tf.saved_model.load(os.path.join(out, "ops_savedmodel"))
    got.update({f"ops_{k}": v.numpy() for k, v in module.run(*_module_args(d)).items()})
    loss = models["compiled"].loss
    np.savez(os.path.join(out, "got.npz"), **got)
    return {"loss_config": {k: loss.get_config()[k] for k in ("alpha", "scale")},
            "loss_class": type(loss).__name__}


BARE_CHILD = """
import json, os, sys
import keras
import tensorflow as tf
out = sys.argv[1]
res = {"metal_ops_imported": "metal_ops" in sys.modules}
for key, call in (("savedmodel", lambda: tf.saved_model.load(os.path.join(out, "ops_savedmodel"))),
                  ("keras", lambda: keras.saving.load_model(os.path.join(out, "hash.keras")))):
    try:
        call()
        res[key] = "loaded"
    except Exception as e:  # the message is what is tested
        res[key] = f"{type(e).__name__}: {e}"
res["metal_ops_imported_after"] = "metal_ops" in sys.modules
with open(os.path.join(out, "bare.json"), "w") as f:
    json.dump(res, f)
"""


CHILDREN = {"save": _child_save, "load": _child_load}


# ----------------------------------------------------------------------------- parent
def _spawn(kind, out):
    env = child_env(TF_CPP_MIN_LOG_LEVEL="2")
    if kind == "bare":  # a process that cannot import metal_ops at all
        env = child_env(pythonpath=[], TF_CPP_MIN_LOG_LEVEL="2")
        return subprocess.Popen([sys.executable, "-c", BARE_CHILD, str(out)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=str(out))
    code = f"from tests.test_saved_models import run_child; run_child({kind!r}, {str(out)!r})"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_child(kind, out):
    result = CHILDREN[kind](out)
    with open(os.path.join(out, f"{kind}.json"), "w") as f:
        json.dump(result, f)


def _finish(proc, out, kind):
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"child {kind} exited with {proc.returncode}:\n{stderr[-4000:]}"
    with open(os.path.join(out, f"{kind}.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("saved")
    save = _finish(_spawn("save", out), out, "save")
    load, bare = _spawn("load", out), _spawn("bare", out)
    return out, save, _finish(load, out, "load"), _finish(bare, out, "bare")


def test_everything_was_saved(saved):
    out, save, _, _ = saved
    for name in ("hash", "adaptive", "distortion", "compiled"):
        assert f"{name}.keras" in save["saved"]
    assert "ops_savedmodel" in save["saved"] and "hash_savedmodel" in save["saved"]


# Gradients that differ between two GPU processes, and how much: the table's
# (float atomics) and the convolution filter's (TensorFlow's backprop through
# cuDNN, whose algorithm each process picks for itself).
GPU_NOT_BITWISE = {"table": 1e-6, "filters": 1e-3}


def test_reloaded_outputs_are_identical(saved):
    out = saved[0]
    expected = np.load(os.path.join(out, "expected.npz"))
    got = np.load(os.path.join(out, "got.npz"))
    gpu = bool(tf.config.list_logical_devices("GPU"))  # the children ran on TensorFlow's default device
    for key in expected.files:
        tolerance = GPU_NOT_BITWISE.get(key.rsplit("_", 1)[-1]) if gpu else None
        if tolerance:
            np.testing.assert_allclose(got[key], expected[key], rtol=tolerance, atol=tolerance * 1e-2, err_msg=key)
        else:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    for name in ("hash", "adaptive", "distortion"):  # graph (exported) vs eager Keras: same values to rounding
        np.testing.assert_allclose(got[f"exported_{name}"], expected[f"keras_{name}"], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    assert len(expected.files) >= 22


def test_loss_object_round_trips(saved):
    load = saved[2]
    assert load["loss_class"] == "RobustLoss"
    assert load["loss_config"] == {"alpha": [2.0, 0.0, -2.0], "scale": [0.5, 1.0, 2.0]}


def test_clear_errors_without_the_library(saved):
    bare = saved[3]
    assert bare["metal_ops_imported"] is False and bare["metal_ops_imported_after"] is False
    msg = bare["savedmodel"]
    assert "not registered" in msg and "'MetalOps" in msg, msg
    msg = bare["keras"]
    assert "HashEncoding" in msg, msg
