"""Keras losses and the layers that add or return a loss: losses.RobustLoss,
layers.AdaptiveRobustLossLayer (with the shipped log-partition table checked
against mpmath quadrature), layers.DistortionRegularization, and the former
names losses.AdaptiveRobustLoss / losses.DistortionLoss."""
import os
import warnings

import keras
import mpmath
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import layers, losses

pytestmark = pytest.mark.every_device

mpmath.mp.dps = 30


def mp_log_partition(alpha):
    """log of the integral over R of exp(-rho(x, alpha, 1)), by mpmath quadrature."""
    a = mpmath.mpf(alpha)
    if a == 2:
        f = lambda x: mpmath.exp(-x * x / 2)  # noqa: E731
    elif a == 0:
        f = lambda x: 1 / (1 + x * x / 2)  # noqa: E731
    else:
        b = abs(a - 2)
        f = lambda x: mpmath.exp(-(b / a) * ((x * x / b + 1) ** (a / 2) - 1))  # noqa: E731
    return float(mpmath.log(2 * mpmath.quad(f, [0, 1, 10, 100, 1e4, mpmath.inf])))


def test_table_is_shipped_with_the_package():
    assert os.path.exists(losses.LOG_PARTITION_TABLE)
    assert os.path.dirname(losses.LOG_PARTITION_TABLE).endswith(os.path.join("metal_ops", "data"))


@pytest.mark.parametrize("alpha", [0.0, 0.001, 0.013, 0.37, 1.0, 1.234567, 1.75, 1.999, 2.0])
def test_log_partition_matches_mpmath(alpha):
    got = losses.log_partition(alpha).numpy()
    np.testing.assert_allclose(got, mp_log_partition(alpha), rtol=0, atol=2e-6)


def test_log_partition_known_values_and_gradient():
    np.testing.assert_allclose(losses.log_partition(0.0).numpy(), np.log(np.pi * np.sqrt(2)), atol=1e-6)
    np.testing.assert_allclose(losses.log_partition(2.0).numpy(), 0.5 * np.log(2 * np.pi), atol=1e-6)
    for alpha in [0.3, 1.0, 1.6]:
        a = tf.constant(alpha)
        with tf.GradientTape() as tape:
            tape.watch(a)
            value = losses.log_partition(a)
        slope = tape.gradient(value, a).numpy()
        h = 1e-4
        fd = (mp_log_partition(alpha + h) - mp_log_partition(alpha - h)) / (2 * h)
        np.testing.assert_allclose(slope, fd, rtol=1e-4, atol=1e-5)


def test_robust_loss_keras_values_and_serialization():
    loss = losses.RobustLoss(alpha=1.0, scale=0.1)
    rng = np.random.default_rng(0)
    y_true = rng.uniform(size=(8, 3)).astype(np.float32)
    y_pred = rng.uniform(size=(8, 3)).astype(np.float32)
    z = ((y_pred - y_true) / 0.1) ** 2
    want = np.mean(np.sqrt(z + 1) - 1)  # Charbonnier, mean over channels then batch
    np.testing.assert_allclose(loss(y_true, y_pred).numpy(), want, rtol=1e-5)
    clone = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(clone, losses.RobustLoss) and clone.alpha == 1.0 and clone.scale == 0.1
    np.testing.assert_allclose(clone(y_true, y_pred).numpy(), want, rtol=1e-5)
    per_channel = losses.RobustLoss(alpha=[0.0, 1.0, 2.0], scale=[0.1, 0.2, 0.3], reduction=None)
    out = per_channel(y_true, y_pred).numpy()
    d = y_pred - y_true
    ref = np.stack([np.log1p(0.5 * (d[:, 0] / 0.1) ** 2), np.sqrt((d[:, 1] / 0.2) ** 2 + 1) - 1,
                    0.5 * (d[:, 2] / 0.3) ** 2], -1).mean(-1)
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_robust_loss_rejects_bad_parameters():
    with pytest.raises(tf.errors.InvalidArgumentError, match="'scale'"):
        losses.RobustLoss(alpha=1.0, scale=0.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'alpha'"):
        losses.RobustLoss(alpha=float("nan"))


def test_robust_loss_trains_a_model():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x @ rng.normal(size=(4, 3))).astype(np.float32)
    y[::9] += 20.0  # outliers
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=losses.RobustLoss(alpha=0.0, scale=0.5),
                  jit_compile=False)
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert model.evaluate(x, y, verbose=0) < 0.7 * before


def test_adaptive_loss_is_the_negative_log_likelihood():
    layer = layers.AdaptiveRobustLossLayer(num_channels=3, alpha_init=1.2, scale_init=0.5, reduction="none")
    np.testing.assert_allclose(layer.alpha().numpy(), [1.2] * 3, rtol=1e-6)
    np.testing.assert_allclose(layer.scale().numpy(), [0.5] * 3, rtol=1e-6)
    assert len(layer.trainable_weights) == 2
    x = np.random.default_rng(2).normal(size=(10, 3)).astype(np.float32)
    nll = layer(x).numpy()
    rho = metal_ops.robust_loss(x, [1.2] * 3, [0.5] * 3).numpy()
    np.testing.assert_allclose(nll, rho + np.log(0.5) + mp_log_partition(1.2), rtol=1e-5, atol=1e-5)
    # the density exp(-NLL) integrates to one (trapezoid on a dense grid, one call)
    grid = np.linspace(-60, 60, 240_001).astype(np.float32)
    dens = np.exp(-layer(np.repeat(grid[:, None], 3, axis=1)).numpy()[:, 0].astype(np.float64))
    total = np.sum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid.astype(np.float64)))
    assert abs(total - 1) < 1e-4


def test_adaptive_loss_learns_alpha_and_scale():
    rng = np.random.default_rng(3)
    data = tf.constant((rng.standard_normal(4000) * 0.3).astype(np.float32))  # Gaussian: alpha -> 2
    layer = layers.AdaptiveRobustLossLayer(alpha_init=1.0, scale_init=1.0)
    opt = keras.optimizers.Adam(0.05)
    for _ in range(150):
        with tf.GradientTape() as tape:
            loss = layer(data)
        grads = tape.gradient(loss, layer.trainable_weights)
        assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
        opt.apply_gradients(zip(grads, layer.trainable_weights))
    assert layer.alpha().numpy()[0] > 1.6
    np.testing.assert_allclose(layer.scale().numpy()[0], 0.3, rtol=0.2)
    clone = layers.AdaptiveRobustLossLayer.from_config(layer.get_config())
    assert clone.get_config()["alpha_lo"] == 0.001 and clone.get_config()["alpha_hi"] == 1.999


def test_adaptive_loss_accepts_y_true_y_pred_and_validates():
    layer = layers.AdaptiveRobustLossLayer()
    y = np.ones((4, 2), np.float32)
    np.testing.assert_allclose(layer(y, y + 1).numpy(), layer(np.ones((4, 2), np.float32)).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="alpha_init"):
        layers.AdaptiveRobustLossLayer(alpha_init=2.5)
    with pytest.raises(ValueError, match="scale_lo"):
        layers.AdaptiveRobustLossLayer(scale_init=0.0)


def test_distortion_loss_layer_adds_itself_as_a_regulariser():
    rng = np.random.default_rng(4)
    w = rng.uniform(size=(6, 8)).astype(np.float32)
    t = np.sort(rng.uniform(2, 6, size=(6, 9)), axis=1).astype(np.float32)
    want = 0.05 * np.mean(metal_ops.distortion_loss(w, t).numpy())

    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(8, activation="softmax")
            self.reg = layers.DistortionRegularization(multiplier=0.05)

        def call(self, inputs):
            weights = self.dense(inputs[0])
            self.reg(weights, inputs[1])
            return weights

    model = Model()
    model([w, t])
    assert len(model.losses) == 1
    layer = layers.DistortionRegularization(multiplier=0.05, add_to_losses=False)
    np.testing.assert_allclose(layer(w, t).numpy(), want, rtol=1e-6)
    assert layers.DistortionRegularization.from_config(layer.get_config()).multiplier == 0.05
    assert layer(np.zeros((0, 8), np.float32), np.zeros((0, 9), np.float32)).numpy() == 0.0
    with tf.GradientTape() as tape:
        wv = tf.Variable(w)
        value = layers.DistortionRegularization(1.0, add_to_losses=False)(wv, t)
    assert np.all(np.isfinite(tape.gradient(value, wv).numpy()))


def test_layers_that_add_a_loss_are_layers_and_losses_are_losses():
    assert issubclass(losses.RobustLoss, keras.losses.Loss)
    for cls in (layers.AdaptiveRobustLossLayer, layers.DistortionRegularization):
        assert issubclass(cls, keras.layers.Layer) and not issubclass(cls, keras.losses.Loss)
    assert "AdaptiveRobustLoss" not in losses.__all__ and "DistortionLoss" not in losses.__all__


@pytest.mark.parametrize("old, new, kwargs", [
    ("AdaptiveRobustLoss", "AdaptiveRobustLossLayer", dict(num_channels=2, alpha_init=0.7)),
    ("DistortionLoss", "DistortionRegularization", dict(multiplier=0.5)),
])
def test_former_names_warn_and_behave_as_the_layers(old, new, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = getattr(losses, old)(**kwargs)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)
    assert isinstance(layer, getattr(layers, new))
    assert layer.get_config() == getattr(layers, new).from_config(layer.get_config()).get_config()


def _loss_models(adaptive_cls, distortion_cls):
    res = keras.Input((2,))
    adaptive = keras.Model(res, adaptive_cls(num_channels=2, alpha_init=0.7, scale_init=0.5, reduction="none")(res))
    w, t = keras.Input((8,)), keras.Input((9,))
    distortion = keras.Model([w, t], distortion_cls(multiplier=0.5)(w, t))
    return adaptive, distortion


@pytest.mark.parametrize("names", ["current", "former"])
def test_keras_files_round_trip_under_either_name(tmp_path, names):
    """Models saved under the former class names (registered names
    metal_ops>AdaptiveRobustLoss, metal_ops>DistortionLoss) load under either name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if names == "current":
            classes = (layers.AdaptiveRobustLossLayer, layers.DistortionRegularization)
        else:
            classes = (losses.AdaptiveRobustLoss, losses.DistortionLoss)
        adaptive, distortion = _loss_models(*classes)
        rng = np.random.default_rng(7)
        res = rng.normal(size=(5, 2)).astype(np.float32)
        w = rng.uniform(size=(4, 8)).astype(np.float32)
        t = np.sort(rng.uniform(2, 6, size=(4, 9)), axis=1).astype(np.float32)
        for name, model, args in (("adaptive", adaptive, res), ("distortion", distortion, [w, t])):
            path = os.path.join(tmp_path, f"{name}.keras")
            model.save(path)
            loaded = keras.saving.load_model(path)
            assert type(loaded.layers[-1]) is type(model.layers[-1])
            np.testing.assert_array_equal(loaded(args).numpy(), model(args).numpy())
    registered = keras.saving.get_registered_name
    assert registered(layers.AdaptiveRobustLossLayer) == "metal_ops>AdaptiveRobustLossLayer"
    assert registered(losses.AdaptiveRobustLoss) == "metal_ops>AdaptiveRobustLoss"
    assert registered(losses.DistortionLoss) == "metal_ops>DistortionLoss"


def test_robust_loss_config_is_json_for_numpy_parameters():
    import json
    loss = losses.RobustLoss(alpha=np.array([2.0, 0.0], np.float32), scale=np.float32(0.5), name="rl")
    config = json.loads(json.dumps(loss.get_config()))
    assert config["alpha"] == [2.0, 0.0] and config["scale"] == 0.5 and config["name"] == "rl"
    clone = losses.RobustLoss.from_config(config)
    y = np.random.default_rng(5).normal(size=(4, 2)).astype(np.float32)
    np.testing.assert_array_equal(clone(y, 0 * y).numpy(), loss(y, 0 * y).numpy())
