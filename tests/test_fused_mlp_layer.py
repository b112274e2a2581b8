"""metal_ops.layers.FusedMLP: the Keras layer over metal_ops.fused_mlp.

Against the equivalent stack of keras.layers.Dense with the same weights
(outputs and gradients, float32: |difference| <= 1e-5 + 1e-5 |value|), a NumPy
forward, Dense's initialisers and weight layout, serialization, .keras and
SavedModel round trips, tf.distribute, mixed precision on the CPU, bad
arguments, activations by name or callable, the former argument name
output_units.
"""
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops.fused_mlp import fused_activation
from metal_ops.layers import FusedMLP
from tests.reference.fused_mlp import act
from tests.child_env import child_env

pytestmark = pytest.mark.every_device

TOL = dict(rtol=1e-5, atol=1e-5)

CONFIGS = [
    # (in_dim, units, hidden_units, hidden_layers, activation, output_activation)
    (31, 3, 64, 2, "relu", "sigmoid"),     # NeRF colour net
    (24, 16, 64, 1, "relu", None),         # NeRF density net
    (5, 1, 16, 3, "leaky_relu", "softplus"),
    (7, 9, 32, 1, "sigmoid", "trunc_exp"),
    (3, 2, 128, 4, "softplus", "relu"),
    (1, 128, 16, 8, "none", "none"),
]


def dense_stack(in_dim, units, hidden_units, hidden_layers, activation, output_activation):
    keras_act = {"none": None, "trunc_exp": None}.get(activation, activation)
    layers = [keras.layers.Dense(hidden_units, activation=keras_act) for _ in range(hidden_layers)]
    out_act = None if output_activation in (None, "none", "trunc_exp") else output_activation
    layers.append(keras.layers.Dense(units, activation=out_act))
    model = keras.Sequential([keras.Input((in_dim,))] + layers)
    if output_activation == "trunc_exp":
        return lambda x: tf.exp(model(x)), model
    return model, model


def numpy_forward(x, weights, activation, output_activation):
    h = x.astype(np.float64)
    for i in range(0, len(weights), 2):
        last = i == len(weights) - 2
        h = act(h @ weights[i] + weights[i + 1], (output_activation or "none") if last else activation)
    return h


def make(config, seed=0):
    in_dim, out, width, depth, hid_act, out_act = config
    layer = FusedMLP(out, hidden_units=width, hidden_layers=depth, activation=hid_act, output_activation=out_act)
    layer.build((None, in_dim))
    rng = np.random.default_rng(seed)
    # Non-zero biases and weights scaled to keep the activations in range.
    layer.set_weights([(w + rng.normal(0, 0.1, w.shape)).astype(np.float32) for w in layer.get_weights()])
    return layer


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_matches_dense_stack_values_and_gradients(config, mode):
    layer = make(config)
    call_dense, dense = dense_stack(*config[:6])
    dense.set_weights(layer.get_weights())
    x = tf.constant(np.random.default_rng(1).normal(0, 1, (37, config[0])).astype(np.float32))
    dy = tf.constant(np.random.default_rng(2).normal(0, 1, (37, config[1])).astype(np.float32))

    def grads(fn, variables):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(y * dy)
        return [y] + tape.gradient(loss, [x] + variables)

    run = (lambda fn, variables: tf.function(lambda: grads(fn, variables))()) if mode == "function" else grads
    ours = run(layer, layer.trainable_variables)
    theirs = run(call_dense, dense.trainable_variables)
    assert len(ours) == len(theirs) == 2 + 2 * (config[3] + 1)
    for a, b in zip(ours, theirs):
        # Two float32 summation orders: an element that cancels to near zero
        # keeps an error of the order of the array's largest values.
        scale = max(1.0, float(np.abs(b.numpy()).max(initial=0.0)))
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=TOL["rtol"], atol=TOL["atol"] * scale)
    np.testing.assert_allclose(ours[0].numpy(), numpy_forward(x.numpy(), layer.get_weights(), config[4], config[5]),
                               **TOL)


def test_weights_have_dense_layout_and_initialisers():
    layer = FusedMLP(3, hidden_units=64, hidden_layers=2)
    layer.build((None, 31))
    weights = layer.get_weights()
    assert [w.shape for w in weights] == [(31, 64), (64,), (64, 64), (64,), (64, 3), (3,)]
    assert [v.name for v in layer.trainable_variables] == ["kernel_0", "bias_0", "kernel_1", "bias_1", "kernel_2",
                                                           "bias_2"]
    for k, b in zip(weights[::2], weights[1::2]):
        limit = np.sqrt(6.0 / sum(k.shape))  # Glorot uniform
        assert np.abs(k).max() <= limit and np.abs(k).max() > 0.8 * limit
        np.testing.assert_array_equal(b, 0.0)
    dense = keras.Sequential([keras.Input((31,)), keras.layers.Dense(64), keras.layers.Dense(64),
                              keras.layers.Dense(3)])
    assert [w.shape for w in dense.get_weights()] == [w.shape for w in weights]
    layer.set_weights(dense.get_weights())  # and back
    for a, b in zip(layer.get_weights(), dense.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_leading_dimensions_empty_batches_and_output_shape():
    layer = make(CONFIGS[0])
    x = np.random.default_rng(0).normal(0, 1, (2, 5, 31)).astype(np.float32)
    y = layer(x)
    assert y.shape == (2, 5, 3)
    np.testing.assert_allclose(y.numpy().reshape(10, 3), layer(x.reshape(10, 31)).numpy(), rtol=0, atol=0)
    assert layer(np.zeros((0, 31), np.float32)).shape == (0, 3)
    assert layer.compute_output_shape((None, 4, 31)) == (None, 4, 3)
    with tf.GradientTape() as tape:
        empty = tf.zeros((0, 31))
        tape.watch(empty)
        loss = tf.reduce_sum(layer(empty))
    grads = tape.gradient(loss, [empty] + layer.trainable_variables)
    assert grads[0].shape == (0, 31)
    for g in grads[1:]:
        np.testing.assert_array_equal(g.numpy(), 0.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(hidden_units=48), "hidden width"),
    (dict(hidden_layers=9), "1 to 8 hidden layers"),
    (dict(hidden_layers=0), r"'hidden_layers' must be an integer >= 1, got 0"),
    (dict(activation="gelu"), r"activation.*gelu"),
    (dict(activation="trunc_exp"), r"activation.*trunc_exp"),
    (dict(activation=tf.nn.gelu), r"hidden activation .* has no fused form"),
    (dict(activation=lambda x: x), r"hidden activation .* has no fused form"),
    (dict(output_activation="no_such_activation"), "no_such_activation"),
    (dict(units=129), r"output width \(columns of the last kernel\) must be in \[1, 128\], got 129"),
    (dict(leaky_relu_alpha=1.5), "leaky_relu_alpha"),
])
def test_bad_arguments_are_refused_at_construction(kwargs, message):
    args = dict(units=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        FusedMLP(**args)


@pytest.mark.parametrize("activation, name", [
    ("relu", "relu"), (keras.activations.relu, "relu"), (tf.nn.relu, "relu"),
    (tf.nn.leaky_relu, "leaky_relu"), (keras.activations.leaky_relu, "leaky_relu"),
    (tf.math.sigmoid, "sigmoid"), (keras.activations.sigmoid, "sigmoid"),
    (tf.nn.softplus, "softplus"), (keras.activations.softplus, "softplus"),
    (None, "none"), ("linear", "none"), (keras.activations.linear, "none"),
])
def test_hidden_activation_by_name_or_callable(activation, name):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 5)).astype(np.float32)
    by_callable = FusedMLP(2, hidden_units=16, hidden_layers=2, activation=activation)
    by_name = FusedMLP(2, hidden_units=16, hidden_layers=2, activation=name)
    by_callable.build((None, 5))
    by_name.build((None, 5))
    by_name.set_weights(by_callable.get_weights())
    np.testing.assert_array_equal(by_callable(x).numpy(), by_name(x).numpy())
    assert fused_activation(activation) == name


def test_output_activation_the_op_lacks_is_applied_after_it():
    """output_activation="tanh" or any callable: the op computes the linear
    output, the activation follows: Dense(units, activation) exactly."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(9, 7)).astype(np.float32)
    for out_act, fn in (("tanh", np.tanh), (keras.activations.tanh, np.tanh), (tf.nn.elu, None),
                        (lambda v: 2.0 * v, lambda v: 2.0 * v)):
        layer = FusedMLP(4, hidden_units=32, hidden_layers=1, output_activation=out_act)
        model, dense = dense_stack(7, 4, 32, 1, "relu", None)
        layer.build((None, 7))
        layer.set_weights(dense.get_weights())
        linear = model(x).numpy()
        want = fn(linear) if fn is not None else keras.activations.elu(linear).numpy()
        np.testing.assert_allclose(layer(x).numpy(), want, **TOL)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) ** 2)
        assert all(g is not None for g in tape.gradient(loss, layer.trainable_variables))
    assert FusedMLP(4, output_activation=metal_ops.trunc_exp)._output_fn is None  # fused


def test_units_and_the_former_output_units():
    assert FusedMLP(units=5).units == 5 and FusedMLP(5).compute_output_shape((None, 3)) == (None, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = FusedMLP(output_units=6, hidden_units=16)
    assert any(issubclass(w.category, DeprecationWarning) and "units" in str(w.message) for w in caught)
    assert layer.units == 6 and layer.output_units == 6 and "output_units" not in layer.get_config()
    with pytest.raises(ValueError, match="not both"):
        FusedMLP(3, output_units=3)
    with pytest.raises(ValueError, match="'units'"):
        FusedMLP()
    # A config saved with output_units loads.
    config = FusedMLP(7, hidden_units=16, name="old").get_config()
    config["output_units"] = config.pop("units")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = FusedMLP.from_config(config)
    assert old.units == 7 and old.name == "old"


def test_bad_input_width_is_refused_at_build():
    with pytest.raises(ValueError, match=r"input width \(the last dimension of 'x'\) must be in \[1, 128\], got 129.*"
                                         r"input width 129"):
        FusedMLP(3)(np.zeros((2, 129), np.float32))
    with pytest.raises(ValueError, match="last input dimension must be known"):
        FusedMLP(3).build((None, None))


@pytest.mark.parametrize("activation, output_activation", [
    ("leaky_relu", "trunc_exp"), (tf.nn.relu, keras.activations.tanh), (keras.activations.sigmoid, "elu")])
def test_config_round_trip(activation, output_activation):
    layer = FusedMLP(5, hidden_units=32, hidden_layers=3, activation=activation, output_activation=output_activation,
                     leaky_relu_alpha=0.1, kernel_initializer="he_normal", name="mlp")
    config = layer.get_config()
    assert {"units", "hidden_units", "hidden_layers", "activation", "output_activation", "leaky_relu_alpha",
            "kernel_initializer", "bias_initializer"} <= set(config)
    clone = FusedMLP.from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, FusedMLP) and restored.get_config() == config


def small_model():
    inputs = keras.Input((6,))
    outputs = FusedMLP(2, hidden_units=16, hidden_layers=2, output_activation="sigmoid")(inputs)
    return keras.Model(inputs, outputs)


def small_input():
    return np.random.default_rng(0).normal(0, 1, (8, 6)).astype(np.float32)


def test_keras_file_round_trip(tmp_path):
    model, x = small_model(), small_input()
    path = os.path.join(tmp_path, "mlp.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert isinstance(loaded.layers[-1], FusedMLP)


def test_savedmodel_round_trip(tmp_path):
    model, x = small_model(), small_input()
    path = os.path.join(tmp_path, "saved")
    model.export(path)
    loaded = tf.saved_model.load(path)
    np.testing.assert_array_equal(loaded.serve(x).numpy(), model(x).numpy())


def test_tf_checkpoint_tracks_weights_by_name(tmp_path):
    layer = make(CONFIGS[1])
    path = tf.train.Checkpoint(mlp=layer).save(os.path.join(tmp_path, "ckpt"))
    names = {name for name, _ in tf.train.list_variables(path)}
    assert {f"mlp/{kind}_{i}/.ATTRIBUTES/VARIABLE_VALUE" for kind in ("kernel", "bias") for i in (0, 1)} <= names
    other = make(CONFIGS[1], seed=5)
    tf.train.Checkpoint(mlp=other).restore(path).assert_existing_objects_matched()
    for a, b in zip(other.get_weights(), layer.get_weights()):
        np.testing.assert_array_equal(a, b)


def mirrored_main():
    """Subprocess entry: two logical CPUs must be configured before TensorFlow starts."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (16, 6)).astype(np.float32)
    target = rng.uniform(0, 1, (16, 2)).astype(np.float32)
    init = small_model().get_weights()

    def train(strategy):
        with strategy.scope():
            model = small_model()
            model.set_weights(init)
            opt = keras.optimizers.SGD(0.1)
            opt.build(model.trainable_variables)

        @tf.function
        def step(x, t):
            def replica(x, t):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum((model(x) - t) ** 2) / 16.0
                grads = tape.gradient(loss, model.trainable_variables)
                # The optimizer sums the replicas' gradients.
                opt.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(replica, args=(x, t))

        data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, target)).batch(16))
        for _ in range(3):
            for xb, tb in data:
                step(xb, tb)
        return model.get_weights()

    distributed = train(strategy)
    single = train(tf.distribute.get_strategy())
    for a, b in zip(distributed, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(distributed[0], init[0])
    print("mirrored: 2 replicas match one device")


def test_trains_under_mirrored_strategy():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = child_env(pythonpath=[p for p in sys.path if p])
    r = subprocess.run([sys.executable, "-m", "tests.test_fused_mlp_layer", "mirrored"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "2 replicas match one device" in r.stdout


@pytest.mark.cpu_semantics("the policy's dtype is chosen by whether TensorFlow lists a GPU")
def test_mixed_precision_policy_on_cpu_computes_in_float32():
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("TensorFlow lists a GPU: under mixed_float16 the layer computes in float16, which the CPU "
                    "kernel refuses with a message naming float16 (FusedMLP's docstring)")
    layer = FusedMLP(3, hidden_units=16, hidden_layers=1, dtype="mixed_float16")
    x = np.random.default_rng(0).normal(0, 1, (4, 5)).astype(np.float32)
    y = layer(x)
    assert y.dtype == tf.float16 and layer.kernel_0.dtype == "float32"
    reference = metal_ops.fused_mlp(x, layer.kernels, layer.biases)
    np.testing.assert_allclose(y.numpy(), reference.numpy().astype(np.float16), rtol=1e-3, atol=1e-3)


if __name__ == "__main__" and sys.argv[1:] == ["mirrored"]:
    mirrored_main()
