"""A NeRF field written as a Keras model of the library's layers: the
functional API (HashEncoding, FusedMLP with TruncExp, SHEncoding, VolumeRender)
trains, saves as .keras and loads in a new process with identical outputs;
under a mixed-precision policy the coordinates, directions and the renderer's
inputs stay float32, in a functional and in a subclassed model."""
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import metal_ops  # noqa: F401  (registers the layers)
from metal_ops import layers
from tests.child_env import child_env
from tests.test_keras_user import policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R, S = 8, 6
GRID = dict(num_levels=4, features_per_level=2, log2_hashmap_size=10, base_resolution=4, finest_resolution=32)


def field():
    """points [R, S, 3] in [0, 1], directions [R, S, 3], t [R, S + 1] -> rgb [R, 3], depth, opacity."""
    points, dirs, t = keras.Input((S, 3)), keras.Input((S, 3)), keras.Input((S + 1,))
    features = layers.HashEncoding(**GRID)(points)
    h = layers.FusedMLP(16, hidden_units=16, hidden_layers=1)(features)
    sigma = layers.TruncExp()(keras.layers.Reshape((S,))(h[..., :1]))
    colour_in = keras.layers.Concatenate()([h, layers.SHEncoding(degree=4)(dirs)])
    rgb = layers.FusedMLP(3, hidden_units=16, hidden_layers=1, output_activation="sigmoid")(colour_in)
    return keras.Model([points, dirs, t], layers.VolumeRender()(sigma, rgb, t))


def samples(seed=0):
    rng = np.random.default_rng(seed)
    points = rng.uniform(size=(2 * R, S, 3)).astype(np.float32)
    dirs = rng.normal(size=(2 * R, S, 3)).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    t = np.cumsum(rng.uniform(0.05, 0.2, size=(2 * R, S + 1)), axis=1).astype(np.float32)
    return points, dirs, t


LOAD = """
import sys, numpy as np, keras, metal_ops
model = keras.models.load_model(sys.argv[1])
data = np.load(sys.argv[2])
out = model.predict([data["points"], data["dirs"], data["t"]], batch_size={batch}, verbose=0)
np.savez(sys.argv[3], *out)
"""


def test_a_functional_field_trains_saves_and_loads_in_a_new_process(tmp_path):
    keras.utils.set_random_seed(0)
    model = field()
    points, dirs, t = samples()
    target = np.random.default_rng(1).uniform(size=(2 * R, 3)).astype(np.float32)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=[keras.losses.MeanSquaredError(), None, None])
    model.fit([points, dirs, t], [target, np.zeros(2 * R), np.zeros(2 * R)], batch_size=R, epochs=2, verbose=0)
    want = model.predict([points, dirs, t], batch_size=R, verbose=0)
    assert [w.shape for w in want] == [(2 * R, 3), (2 * R,), (2 * R,)]
    path, data, got = tmp_path / "field.keras", tmp_path / "data.npz", tmp_path / "out.npz"
    model.save(path)
    np.savez(data, points=points, dirs=dirs, t=t)
    out = subprocess.run([sys.executable, "-c", LOAD.format(batch=R), str(path), str(data), str(got)],
                         env=child_env(TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = np.load(got)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(loaded[f"arr_{i}"], w)


def test_the_layers_configs_round_trip():
    for layer in (layers.SHEncoding(degree=3), layers.TruncExp(),
                  layers.VolumeRender(early_termination=0.0, return_weights=True, validate=False)):
        config = keras.saving.serialize_keras_object(layer)
        again = keras.saving.deserialize_keras_object(config)
        assert type(again) is type(layer) and again.get_config() == layer.get_config()


def test_volume_render_layer_is_the_op():
    rng = np.random.default_rng(2)
    sigma, rgb = rng.uniform(size=(R, S)).astype(np.float32), rng.uniform(size=(R, S, 3)).astype(np.float32)
    t = np.cumsum(rng.uniform(0.1, 0.2, size=(R, S + 1)), axis=1).astype(np.float32)
    got = layers.VolumeRender(return_weights=True)(sigma, rgb, t, background=np.ones(3, np.float32))
    want = metal_ops.volume_render(sigma, rgb, t, background=np.ones(3, np.float32), return_weights=True)
    assert len(got) == 4
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(layers.SHEncoding(degree=2)(rgb), metal_ops.sh_encode(rgb, degree=2))
    np.testing.assert_array_equal(layers.TruncExp()(sigma), metal_ops.trunc_exp(sigma))


# ---- float32 coordinates under every policy --------------------------------------------------------

class SubclassedField(keras.Model):
    """The documented way (README "Dtypes"): autocast=False, so the model's
    inputs reach call() in their own dtype; the layers inside still follow the policy."""

    def __init__(self):
        super().__init__(autocast=False)
        self.encoding = layers.HashEncoding(**GRID)
        self.mlp = layers.FusedMLP(1, hidden_units=16, hidden_layers=1)
        self.density = layers.TruncExp()
        self.dirs = layers.SHEncoding(degree=2)
        self.render = layers.VolumeRender()

    def call(self, inputs):
        points, dirs, t = inputs
        self.seen = (points.dtype, dirs.dtype, t.dtype)
        features = self.encoding(points)
        sigma = self.density(tf.squeeze(self.mlp(features), -1))
        rgb = tf.sigmoid(self.dirs(dirs)[..., 1:])
        return features, self.render(sigma, rgb, t)


def test_coordinates_stay_float32_under_mixed_float16():
    points, dirs, t = samples(3)
    points = points * 0.999 + 3e-4  # coordinates float16 would round
    with policy("mixed_float16"):
        model = SubclassedField()
        features, (rgb, depth, opacity) = model((points, dirs, t))
        assert model.seen == (tf.float32, tf.float32, tf.float32)
        assert features.dtype == tf.float16 and rgb.dtype == depth.dtype == tf.float32
        encoding = model.encoding
    exact = metal_ops.hash_encode(points.reshape(-1, 3), encoding.table, num_levels=GRID["num_levels"],
                                  log2_hashmap_size=GRID["log2_hashmap_size"],
                                  base_resolution=GRID["base_resolution"],
                                  finest_resolution=GRID["finest_resolution"]).numpy().reshape(features.shape)
    # The float32 path's features, rounded once to float16.
    np.testing.assert_array_equal(features.numpy(), exact.astype(np.float16))
    with policy("mixed_float16"):
        functional = field()
        assert functional.layers[0].dtype == "float32"
        out = functional([points, dirs, t])
        assert all(o.dtype == tf.float32 for o in out)
