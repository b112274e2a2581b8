"""Keras keeps XLA for models of the library's layers and losses
(docs/XLA.md): `supports_jit`, the resolution of `jit_compile` ("auto" turns
XLA on only where a GPU is listed; a listed GPU is simulated for the
resolution alone), and a model of HashEncoding and FusedMLP layers, with a
stock loss and with losses.RobustLoss, that trains with `jit_compile=True`
and "auto" to the weights it reaches without XLA, on every device
(tests/devices.py): on a CUDA GPU through the CUDA handlers."""
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import _loader, layers, losses

pytestmark = [
    pytest.mark.every_device,
    pytest.mark.skipif(sys.platform == "darwin", reason="Metal has no XLA"),
]
PROCESS = "how Keras resolves jit_compile in this process, not a device's computation"
GPU_LISTED = bool(tf.config.list_physical_devices("GPU"))


def usable_under_xla(*ops):
    """Whether XLA compiles these ops here: always on the CPU; where a GPU is
    listed, where each has a CUDA handler (what the layers' supports_jit says)."""
    return not GPU_LISTED or all(op in _loader.xla_cuda_ops() for op in ops)


MLP_MODEL_OPS = ("MetalOpsHashEncode", "MetalOpsHashEncodeGrad", "MetalOpsFusedMLP", "MetalOpsFusedMLPGrad")


def mlp_model(seed=0):
    """HashEncoding -> FusedMLP -> FusedMLP, 3 coordinates in [0, 1] to 3 values."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((3,))
    h = layers.HashEncoding(num_levels=4, features_per_level=2, log2_hashmap_size=10, base_resolution=4,
                            per_level_scale=1.5)(inputs)
    h = layers.FusedMLP(16, hidden_units=32, hidden_layers=2, activation="relu")(h)
    outputs = layers.FusedMLP(3, hidden_units=16, hidden_layers=1, activation="softplus",
                              output_activation="sigmoid")(h)
    return keras.Model(inputs, outputs)


def data(seed=1, n=256):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n, 3)).astype(np.float32)
    y = (0.5 + 0.5 * np.sin(4 * x[:, [1, 2, 0]] + x)).astype(np.float32)
    return x, y


@pytest.mark.cpu_semantics(PROCESS)
def test_layers_and_losses_support_jit():
    for layer, op in [(layers.FusedMLP(4), "MetalOpsFusedMLP"),
                      (layers.HashEncoding(num_levels=2, log2_hashmap_size=8), "MetalOpsHashEncode"),
                      (layers.AdaptiveRobustLossLayer(), "MetalOpsRobustLoss"),
                      (layers.DistortionRegularization(), "MetalOpsDistortionLoss")]:
        assert layer.supports_jit is usable_under_xla(op, op + "Grad"), type(layer).__name__


@pytest.fixture
def xla_not_registered(monkeypatch):
    """The state after `import metal_ops` came after TensorFlow's first op
    (tests/test_xla.py runs that order in a child process)."""
    monkeypatch.setitem(_loader._xla_state, "registered", False)


@pytest.fixture
def listed_gpu(monkeypatch):
    """tf.config.list_physical_devices() with a GPU added: what Keras's "auto" looks at."""
    real = tf.config.list_physical_devices

    def with_gpu(device_type=None):
        devices = real(device_type)
        if device_type in (None, "GPU") and not real("GPU"):
            devices = devices + [tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")]
        return devices

    monkeypatch.setattr(tf.config, "list_physical_devices", with_gpu)


@pytest.fixture
def cuda_handlers(monkeypatch):
    """Sets the ops whose CUDA handlers the CUDA library registered (none
    without a CUDA build: _loader.register_xla_cuda_handlers)."""
    def set_ops(*ops):
        monkeypatch.setitem(_loader._xla_state, "cuda_ops", frozenset(ops))
    set_ops()
    return set_ops


@pytest.mark.cpu_semantics(PROCESS)
def test_auto_resolves_to_no_xla_where_a_gpu_is_listed_without_cuda_handlers(listed_gpu, cuda_handlers):
    """With a GPU listed and no CUDA handlers the layers report no XLA support,
    so Keras's "auto" (XLA on wherever a GPU is listed) keeps the model off
    XLA instead of failing to compile it."""
    model = mlp_model()
    assert not any(layer.supports_jit for layer in model.layers[1:])
    model.compile(optimizer="adam", loss="mse", jit_compile="auto")
    assert model.jit_compile is False


@pytest.mark.cpu_semantics(PROCESS)
def test_auto_resolves_to_xla_where_a_gpu_is_listed_with_cuda_handlers(listed_gpu, cuda_handlers):
    """A layer supports XLA on a GPU where the CUDA library registered the
    handlers of its ops (forward and gradient); "auto" then turns XLA on."""
    cuda_handlers("MetalOpsHashEncode", "MetalOpsHashEncodeGrad", "MetalOpsFusedMLP")
    assert layers.HashEncoding(num_levels=2, log2_hashmap_size=8).supports_jit is True
    assert layers.FusedMLP(4).supports_jit is False  # the gradient's handler is missing
    cuda_handlers("MetalOpsHashEncode", "MetalOpsHashEncodeGrad", "MetalOpsFusedMLP", "MetalOpsFusedMLPGrad")
    model = mlp_model()
    assert all(layer.supports_jit for layer in model.layers[1:])
    model.compile(optimizer="adam", loss="mse", jit_compile="auto")
    assert model.jit_compile is True


@pytest.mark.cpu_semantics(PROCESS)
@pytest.mark.skipif(GPU_LISTED, reason="a GPU is listed here")
def test_auto_resolves_to_no_xla_on_a_cpu_only_machine():
    model = mlp_model()
    model.compile(optimizer="adam", loss="mse", jit_compile="auto")
    assert model.jit_compile is False  # Keras 3 turns XLA on by itself only where a GPU is listed


@pytest.mark.cpu_semantics(PROCESS)
def test_no_xla_where_the_kernels_were_registered_too_late(xla_not_registered):
    """Keras runs the model without XLA (with its warning) instead of failing to compile it."""
    model = mlp_model()
    assert not any(layer.supports_jit for layer in model.layers[1:])
    with pytest.warns(UserWarning, match="doesn't support `jit_compile=True`"):
        model.compile(optimizer="adam", loss="mse", jit_compile=True)
    assert model.jit_compile is False


@pytest.mark.cpu_semantics(PROCESS)
@pytest.mark.skipif(not GPU_LISTED, reason="no GPU is listed here (a listed GPU is simulated above)")
def test_auto_resolves_to_xla_on_this_gpu():
    """The real thing: Keras's "auto" on this machine's GPU, with the CUDA library's handlers."""
    if not usable_under_xla(*MLP_MODEL_OPS):
        pytest.skip("the CUDA handlers of HashEncode and FusedMLP are not registered here")
    model = mlp_model()
    model.compile(optimizer="adam", loss="mse", jit_compile="auto")
    assert model.jit_compile is True


@pytest.mark.cpu_semantics(PROCESS)
def test_a_model_with_every_layer_keeps_xla():
    ops = ("MetalOpsFusedMLP", "MetalOpsRobustLoss", "MetalOpsDistortionLoss")
    if not usable_under_xla(*ops, *(op + "Grad" for op in ops)):
        pytest.skip("a layer's ops have no CUDA handler here (docs/XLA.md)")
    weights, t = keras.Input((8,)), keras.Input((9,))
    residual = layers.FusedMLP(8, hidden_units=16, hidden_layers=1)(weights)
    loss = layers.AdaptiveRobustLossLayer(num_channels=8)(residual)
    distortion = layers.DistortionRegularization(add_to_losses=False)(keras.activations.sigmoid(residual), t)
    model = keras.Model([weights, t], [loss, distortion])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.compile(optimizer="adam", loss="mse", jit_compile=True)
    assert model.jit_compile is True


@pytest.mark.cpu_semantics(PROCESS)
def test_jit_compile_true_is_kept():
    model = mlp_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Model doesn't support `jit_compile=True`" would fail here
        model.compile(optimizer="adam", loss="mse", jit_compile=True)
    assert model.jit_compile is True


@pytest.mark.parametrize("jit", [True, "auto"])
@pytest.mark.parametrize("loss", ["mse", "robust"])
def test_training_with_xla_reaches_the_weights_without_it(loss, jit, tf_device):
    """HashEncoding + FusedMLP (+ losses.RobustLoss): the train step compiled
    with XLA (jit_compile=True, or "auto", which is XLA where a GPU is listed)
    reaches the weights of the train step without it. On a GPU the hash
    table's gradient is summed with atomics, in an order that changes from run
    to run: the losses and the trained model's predictions are compared there."""
    on_gpu = "GPU" in tf_device
    if on_gpu and not usable_under_xla(*MLP_MODEL_OPS, "MetalOpsRobustLoss", "MetalOpsRobustLossGrad"):
        pytest.skip("the CUDA handlers of the model's ops are not registered here")
    x, y = data()
    trained = []
    for mode in (jit, False):
        model = mlp_model()
        fn = losses.RobustLoss(alpha=[1.0, 0.0, -2.0], scale=0.1) if loss == "robust" else loss
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=fn, jit_compile=mode)
        assert model.jit_compile is (GPU_LISTED if mode == "auto" else mode)
        history = model.fit(x, y, batch_size=64, epochs=3, shuffle=False, verbose=0)
        trained.append(([w.numpy() for w in model.weights], history.history["loss"], model.predict(x, verbose=0)))
    (w_xla, loss_xla, y_xla), (w_plain, loss_plain, y_plain) = trained
    assert np.isfinite(loss_xla).all() and loss_xla[-1] < loss_xla[0]
    np.testing.assert_allclose(loss_xla, loss_plain, rtol=2e-3 if on_gpu else 1e-4)
    if on_gpu:
        np.testing.assert_allclose(y_xla, y_plain, atol=2e-2)
        return
    for a, b in zip(w_xla, w_plain):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_the_ops_in_a_jit_function_without_keras():
    x = tf.random.stateless_uniform([32, 3], seed=[1, 2])
    model = mlp_model()
    fn = tf.function(lambda t: metal_ops.trunc_exp(model(t)), jit_compile=True)
    np.testing.assert_allclose(fn(x), metal_ops.trunc_exp(model(x)), rtol=1e-5, atol=1e-6)
