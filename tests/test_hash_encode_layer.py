"""metal_ops.layers.HashEncoding: Keras 3 layer over metal_ops.hash_encode."""
import inspect
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.layers import HashEncoding
from tests.reference import hash_encode as ref

pytestmark = pytest.mark.every_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(num_levels=4, features_per_level=2, log2_hashmap_size=10, base_resolution=4, finest_resolution=32)


def small_layer(**over):
    kw = dict(SMALL)
    kw.update(over)
    return HashEncoding(**kw)


def test_defaults_are_the_instant_ngp_nerf_grid():
    layer = HashEncoding()
    layer.build((None, 3))
    assert tuple(layer.table.shape) == (12_196_240 // 2, 2)
    assert layer.table.dtype == "float32" and layer.table.trainable
    values = layer.table.numpy()
    assert np.abs(values).max() <= 1e-4 and values.std() > 1e-5  # uniform(-1e-4, 1e-4)
    assert layer.supports_jit is True  # the op has XLA kernels (docs/XLA.md)
    assert np.isclose(layer.effective_per_level_scale, np.exp(np.log(128) / 15))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_matches_op_and_reference(d):
    layer = small_layer()
    x = np.random.default_rng(d).uniform(0, 1, (50, d)).astype(np.float32)
    y = layer(x)
    assert y.shape == (50, 8) and y.dtype == tf.float32
    table = layer.table.numpy()
    expected = metal_ops.hash_encode(x, table, num_levels=4, log2_hashmap_size=10, base_resolution=4,
                                     per_level_scale=layer.effective_per_level_scale)
    np.testing.assert_array_equal(y.numpy(), expected.numpy())
    np.testing.assert_allclose(
        y.numpy(),
        ref.encode(x, table, num_levels=4, log2_hashmap_size=10, base_resolution=4,
                   per_level_scale=layer.effective_per_level_scale),
        atol=1e-9)


def test_leading_dimensions_and_output_shape():
    layer = small_layer(per_level_scale=1.5, interpolation="smoothstep", out_of_range="zero")
    x = np.random.default_rng(0).uniform(0, 1, (2, 5, 3)).astype(np.float32)
    y = layer(x)
    assert y.shape == (2, 5, 8)
    np.testing.assert_array_equal(y.numpy().reshape(10, 8), layer(x.reshape(10, 3)).numpy())
    assert layer.compute_output_shape((None, 5, 3)) == (None, 5, 8)


def test_config_round_trip():
    layer = small_layer(per_level_scale=1.7, interpolation="smoothstep", out_of_range="wrap", table_dtype="float16",
                        name="grid")
    config = layer.get_config()
    json.dumps(config)
    clone = HashEncoding.from_config(config)
    assert clone.get_config() == config
    x = np.random.default_rng(1).uniform(0, 1, (20, 2)).astype(np.float32)
    layer(x)
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(x).numpy(), layer(x).numpy())
    # Registered for deserialization by name.
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(again, HashEncoding) and again.get_config() == config


def test_float16_table():
    layer = small_layer(table_dtype="float16")
    x = np.random.default_rng(2).uniform(0, 1, (30, 3)).astype(np.float32)
    y = layer(x)
    assert layer.table.dtype == "float16" and y.dtype == tf.float32
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x) ** 2)
    (g,) = tape.gradient(loss, layer.trainable_weights)
    assert g.dtype == tf.float16 and np.any(g.numpy())


@pytest.mark.parametrize("table_dtype", ["float32", "float16"])
def test_mixed_precision(table_dtype):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        layer = small_layer(table_dtype=table_dtype)
        x = tf.constant(np.random.default_rng(3).uniform(0, 1, (30, 3)), tf.float16)
        with tf.GradientTape() as tape:
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
        (g,) = tape.gradient(loss, layer.trainable_weights)
        assert y.dtype == tf.float16
        assert layer.table.dtype == table_dtype and g.dtype == table_dtype
        assert np.all(np.isfinite(g.numpy())) and np.any(g.numpy())
        # Inputs are cast to float32 for the op: same features as float32 inputs.
        ref_y = metal_ops.hash_encode(tf.cast(x, tf.float32), layer.table.value, num_levels=4, log2_hashmap_size=10,
                                      base_resolution=4, per_level_scale=layer.effective_per_level_scale)
        np.testing.assert_array_equal(y.numpy(), tf.cast(ref_y, tf.float16).numpy())
    finally:
        keras.config.set_dtype_policy(previous)


def _toy_model(**over):
    inputs = keras.Input((2,))
    h = small_layer(**over)(inputs)
    h = keras.layers.Dense(16, activation="relu")(h)
    outputs = keras.layers.Dense(1)(h)
    return keras.Model(inputs, outputs)


def _toy_data(n=512):
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, (n, 2)).astype(np.float32)
    y = (np.sin(6 * x[:, :1]) * np.cos(5 * x[:, 1:])).astype(np.float32)
    return x, y


def test_model_fit_trains_the_table():
    keras.utils.set_random_seed(0)
    model = _toy_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    x, y = _toy_data()
    table_before = model.layers[1].table.numpy().copy()
    first = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=8, batch_size=64, verbose=0)
    last = model.evaluate(x, y, verbose=0)
    assert last < 0.5 * first
    assert not np.array_equal(model.layers[1].table.numpy(), table_before)


_RELOAD_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import keras
    import metal_ops  # registers the ops' gradients and the HashEncoding class
    kind, path, x_path, y_path, device = sys.argv[1:6]
    x = np.load(x_path)
    with tf.device(device):  # the parent's device: the same kernels, the same bits
        if kind == "keras":
            model = keras.saving.load_model(path)
            assert type(model.layers[1]).__name__ == "HashEncoding"
            y = model(x).numpy()
        else:
            metal_ops.load_library()  # the custom ops must be registered before loading
            loaded = tf.saved_model.load(path)
            y = loaded.serve(tf.constant(x)).numpy()
    np.testing.assert_allclose(y, np.load(y_path), rtol=1e-6, atol=1e-7)
    print("RELOAD_OK", kind)
""")


def test_save_and_reload_in_fresh_process(tmp_path, tf_device):
    keras.utils.set_random_seed(1)
    model = _toy_model(interpolation="smoothstep")
    model.compile(optimizer="adam", loss="mse")
    x, y = _toy_data(128)
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    expected = model(x).numpy()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", expected)
    model.save(tmp_path / "model.keras")
    model.export(str(tmp_path / "saved_model"), verbose=False)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for kind, path in (("keras", tmp_path / "model.keras"), ("saved_model", tmp_path / "saved_model")):
        out = subprocess.run([sys.executable, "-c", _RELOAD_SCRIPT, kind, str(path), str(tmp_path / "x.npy"),
                              str(tmp_path / "y.npy"), tf_device], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0 and f"RELOAD_OK {kind}" in out.stdout, out.stderr[-3000:]


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(interpolation="cubic"), "interpolation.*cubic"),
    (dict(out_of_range="mirror"), "out_of_range.*mirror"),
    (dict(features_per_level=3), r"F in \{1, 2, 4, 8\}, got F = 3.*features_per_level=3"),
    (dict(table_dtype="bfloat16"), "table_dtype"),
    (dict(table_dtype="no_such_dtype"), "table_dtype"),
    (dict(num_levels=33), r"num_levels must be in \[1, 32\], got 33"),
    (dict(num_levels=0), "num_levels"),
    (dict(log2_hashmap_size=31), r"log2_hashmap_size must be in \[1, 30\], got 31"),
    (dict(finest_resolution=2), "per_level_scale must be finite and >= 1"),
    (dict(per_level_scale=0.5), "per_level_scale must be finite and >= 1, got 0.5"),
    (dict(num_levels=16, base_resolution=1 << 20, per_level_scale=8.0), "resolution of the finest level"),
])
def test_bad_arguments_are_refused_at_construction_by_the_op(kwargs, pattern):
    """The op's checks and messages (kernels/hash_encode/hash_encode.h, the op's
    attribute definitions), raised when the layer is made."""
    with pytest.raises(ValueError, match=pattern):
        small_layer(**kwargs)


def test_defaults_are_hash_encode_s():
    layer_defaults = {k: v.default for k, v in inspect.signature(HashEncoding.__init__).parameters.items()
                      if v.default is not inspect.Parameter.empty}
    function_defaults = {k: v.default for k, v in inspect.signature(metal_ops.hash_encode).parameters.items()
                         if v.default is not inspect.Parameter.empty}
    shared = set(layer_defaults) & set(function_defaults)
    assert {"num_levels", "log2_hashmap_size", "base_resolution", "finest_resolution", "per_level_scale",
            "interpolation", "out_of_range"} <= shared
    assert all(layer_defaults[k] == function_defaults[k] for k in shared)
    layer = HashEncoding(features_per_level=1)
    x = np.random.default_rng(3).uniform(0, 1, (20, 1)).astype(np.float32)
    y = layer(x)
    np.testing.assert_array_equal(y.numpy(), metal_ops.hash_encode(x, layer.table.numpy()).numpy())
    assert layer.table.shape[0] == metal_ops.hash_grid_size(1)


def test_bad_input_dimension():
    with pytest.raises(ValueError, match="last input dimension must be 1..4"):
        small_layer()(np.zeros((3, 5), np.float32))
