"""The layers, losses and ops as a Keras user meets them: Keras's conventions
(ValueError for bad constructor arguments, the input-spec message for an
input of another width, NaN in gives NaN out, regularizer layers that pass
their input through, Dense's arguments, losses in float32 under mixed
precision), the one dtype rule of the ops (README "Dtypes"), errors that name
the user's argument, and the package's own surface (dir, help, the op
modules)."""
import contextlib
import importlib
import os
import pydoc
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import layers, losses
from tests.child_env import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_GRID = dict(num_levels=4, log2_hashmap_size=10, base_resolution=4, finest_resolution=32)


@contextlib.contextmanager
def policy(name):
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(before)


def rays(r=4, s=8, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(size=(r, s)).astype(np.float32),
            np.sort(rng.uniform(2, 6, size=(r, s + 1)), axis=1).astype(np.float32))


# ---- mixed precision: the loss layers compute in float32 ---------------------------------------

def test_loss_layers_work_under_mixed_precision():
    x = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)
    w, t = rays()
    want_nll = layers.AdaptiveRobustLossLayer(num_channels=3)(x).numpy()
    want_dist = layers.DistortionRegularization(1.0, add_to_losses=False)(w, t).numpy()
    with policy("mixed_float16"):
        nll = layers.AdaptiveRobustLossLayer(num_channels=3)(x)
        dist = layers.DistortionRegularization(1.0, add_to_losses=False)(w, t)
        dist16 = layers.DistortionRegularization(1.0, add_to_losses=False)(tf.cast(w, tf.float16), t)
    assert nll.dtype == tf.float32 and dist.dtype == tf.float32
    np.testing.assert_allclose(nll.numpy(), want_nll, rtol=1e-6)
    np.testing.assert_allclose(dist.numpy(), want_dist, rtol=1e-6)
    np.testing.assert_allclose(dist16.numpy(), want_dist, rtol=2e-3)


# ---- NaN in, NaN out ----------------------------------------------------------------------------

@pytest.mark.parametrize("activation, output_activation", [
    ("relu", None), ("relu", "sigmoid"), ("leaky_relu", "relu"), ("sigmoid", "softplus"), ("softplus", "trunc_exp"),
    ("none", "sigmoid"),
])
def test_fused_mlp_passes_nan_through_as_the_dense_stack_does(activation, output_activation):
    x = np.random.default_rng(2).uniform(-1, 1, size=(37, 5)).astype(np.float32)
    x[3, 1] = np.nan
    layer = layers.FusedMLP(3, hidden_units=16, hidden_layers=2, activation=activation,
                            output_activation=output_activation)
    with tf.GradientTape() as tape:
        y = layer(x)
        loss = tf.reduce_sum(y)
    grads = tape.gradient(loss, layer.trainable_weights)
    y = y.numpy()
    assert np.all(np.isnan(y[3])), y[3]
    assert np.all(np.isfinite(np.delete(y, 3, axis=0)))
    assert np.isnan(grads[0].numpy()).any()  # as the Dense stack's: the NaN row reaches the weights' gradients


def test_trunc_exp_of_nan_is_nan():
    y = metal_ops.trunc_exp(np.array([np.nan] * 37 + [0.0], np.float32)).numpy()
    assert np.all(np.isnan(y[:-1])) and y[-1] == 1.0


# ---- regularizer layers pass their input through -----------------------------------------------

def test_distortion_regularization_stays_in_a_functional_model():
    w_in, t_in = keras.Input((8,)), keras.Input((9,))
    weights = keras.layers.Softmax()(w_in)
    weights = layers.DistortionRegularization(0.5)(weights, t_in)
    model = keras.Model([w_in, t_in], keras.layers.Dense(2)(weights))
    assert any(isinstance(layer, layers.DistortionRegularization) for layer in model.layers)
    w, t = rays()
    out = model([w, t])
    assert out.shape == (4, 2) and len(model.losses) == 1
    want = 0.5 * np.mean(metal_ops.distortion_loss(tf.nn.softmax(w), t).numpy())
    np.testing.assert_allclose(model.losses[0].numpy(), want, rtol=1e-5)
    passed = layers.DistortionRegularization(0.5)(w, t)
    np.testing.assert_array_equal(passed.numpy(), w)


# ---- Dense's and Embedding's arguments ---------------------------------------------------------

def test_fused_mlp_takes_dense_arguments():
    x = np.random.default_rng(3).uniform(-1, 1, size=(9, 5)).astype(np.float32)
    layer = layers.FusedMLP(4, hidden_units=16, hidden_layers=2, use_bias=False,
                            kernel_regularizer=keras.regularizers.L2(0.1), kernel_constraint="non_neg",
                            activity_regularizer="l1")
    y = layer(x)
    assert len(layer.get_weights()) == 3 and [w.shape for w in layer.get_weights()] == [(5, 16), (16, 16), (16, 4)]
    dense = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, "relu", use_bias=False),
                              keras.layers.Dense(16, "relu", use_bias=False), keras.layers.Dense(4, use_bias=False)])
    dense.set_weights(layer.get_weights())
    np.testing.assert_allclose(y.numpy(), dense(x).numpy(), rtol=1e-5, atol=1e-5)
    assert len(layer.losses) == 4  # three kernels' L2 and the activity's L1
    config = layer.get_config()
    again = layers.FusedMLP.from_config(config)
    assert again.get_config() == config and again.use_bias is False
    with_bias = layers.FusedMLP(4, hidden_units=16, bias_regularizer="l2")
    with_bias(x)
    assert len(with_bias.losses) == 3


def test_hash_encoding_takes_an_initializer_regularizer_and_constraint():
    layer = layers.HashEncoding(**SMALL_GRID, table_initializer="ones", table_regularizer=keras.regularizers.L2(1.0),
                                table_constraint="non_neg")
    y = layer(np.random.default_rng(4).uniform(size=(6, 3)).astype(np.float32))
    assert np.all(layer.table.numpy() == 1.0)
    np.testing.assert_allclose(y.numpy(), 1.0, rtol=1e-6)
    assert len(layer.losses) == 1
    config = layer.get_config()
    assert layers.HashEncoding.from_config(config).get_config() == config
    default = layers.HashEncoding(**SMALL_GRID)
    default.build((None, 3))
    assert np.abs(default.table.numpy()).max() <= 1e-4 and np.any(default.table.numpy() != 0)


# ---- errors that name the user's mistake -------------------------------------------------------

@pytest.mark.parametrize("make, width", [
    (lambda: layers.FusedMLP(3, hidden_units=16), 6),
    (lambda: layers.HashEncoding(**SMALL_GRID), 2),
    (lambda: layers.AdaptiveRobustLossLayer(num_channels=3), 2),
])
def test_another_input_width_gets_keras_input_spec_message(make, width):
    layer = make()
    layer(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=rf"expected axis -1 of input shape to have value 3.*\(2, {width}\)") as e:
        layer(np.zeros((2, width), np.float32))
    assert "reshape" not in str(e.value) and "'alpha'" not in str(e.value)


def test_layer_errors_are_the_ops_own_messages():
    with pytest.raises(ValueError, match=r"output width .* must be in \[1, 128\], got 200 \(layer 'fused_mlp") as e:
        layers.FusedMLP(200, name="fused_mlp")
    assert "got 1 and" not in str(e.value) and "{{node" not in str(e.value)
    with pytest.raises(ValueError, match=r"hidden activation 'gelu' has no fused form"):
        layers.FusedMLP(3, activation="gelu")
    with pytest.raises(ValueError, match=r"has no fused form"):
        metal_ops.fused_mlp(np.zeros((1, 2), np.float32), [np.zeros((2, 16), np.float32)] * 2,
                            [np.zeros(16, np.float32)] * 2, activation="gelu")
    with pytest.raises(ValueError, match="log2_hashmap_size") as e:
        layers.HashEncoding(log2_hashmap_size=40)
    assert "{{node" not in str(e.value)


def test_function_errors_name_the_argument_without_a_nodedef():
    x = np.zeros((4, 3), np.float32)
    kernels = [np.zeros((3, 16), np.float32), np.zeros((16, 2), np.float32)]
    with pytest.raises(ValueError, match=r"'biases' must hold one vector per kernel \(2\), got 1") as e:
        metal_ops.fused_mlp(x, kernels, [np.zeros(16, np.float32)])
    assert "NodeDef" not in str(e.value)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"num_levels must be in \[1, 32\], got 0") as e:
        metal_ops.hash_grid_size(3, num_levels=0)
    assert "NodeDef" not in str(e.value) and "{{" not in str(e.value)
    with pytest.raises(ValueError, match="scale") as e:
        losses.RobustLoss(scale=-1.0)
    with pytest.raises(ValueError, match=r"^RobustLoss: 'scale' has shape \[3\]"):
        losses.RobustLoss(alpha=[1.0, 2.0], scale=[1.0, 1.0, 1.0])


def test_num_samples_is_checked_as_the_user_gave_it():
    n = 6
    args = (np.ones(n, np.float32), np.ones((n, 3), np.float32), np.zeros(n, np.float32), np.ones(n, np.float32),
            np.int32([0, 2]), np.int32([2, 2]))
    out = metal_ops.packed_volume_render(*args, num_samples=np.int32(4))
    assert out.rgb.shape == (2, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'num_samples' must be at most N") as e:
        metal_ops.packed_volume_render(*args[:5], np.int32([2, 5]), num_samples=np.int32(7))
    assert "negative" not in str(e.value) and ">= 0" not in str(e.value)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'ray_counts' must sum to 'num_samples'"):
        metal_ops.packed_volume_render(*args, num_samples=np.int32(5))


# ---- one dtype rule ----------------------------------------------------------------------------

F64 = np.float64


@pytest.mark.parametrize("call, argument", [
    (lambda: metal_ops.hash_encode(np.zeros((2, 3), F64), np.zeros((metal_ops.hash_grid_size(3, **SMALL_GRID), 2),
                                                                     np.float32), **SMALL_GRID), "'inputs'"),
    (lambda: metal_ops.fused_mlp(np.zeros((2, 3), F64), [np.zeros((3, 16))] * 1 + [np.zeros((16, 2))],
                                 [np.zeros(16), np.zeros(2)]), "'x' must be float32 or float16, got float64"),
    (lambda: metal_ops.fused_mlp(np.zeros((2, 3), np.float32), [np.zeros((3, 16)), np.zeros((16, 2))],
                                 [np.zeros(16), np.zeros(2)]), "'kernels\\[0\\]' must be float32 \\(the dtype of 'x'\\)"),
    (lambda: metal_ops.robust_loss(np.zeros(3, F64), 1.0, 1.0), "'x'"),
    (lambda: metal_ops.sh_encode(np.zeros((2, 3), F64)), "'dirs'"),
    (lambda: metal_ops.distortion_loss(*[a.astype(F64) for a in rays()]), "'weights'"),
    (lambda: metal_ops.volume_render(np.ones((2, 3), np.int32), np.ones((2, 3, 3)), np.ones((2, 4))), "'sigma'"),
    (lambda: metal_ops.volume_render(np.ones((2, 3), np.float32), np.ones((2, 3, 3), F64),
                                     np.ones((2, 4), np.float32)), "'rgb' must be float32 \\(the dtype of 'sigma'\\)"),
    (lambda: metal_ops.zero_out(np.zeros(3, np.float16)), "'x'"),
])
def test_a_dtype_the_op_lacks_is_a_type_error_naming_the_argument(call, argument):
    with pytest.raises(TypeError, match=argument):
        call()


def test_dtypes_the_ops_have_are_kept_and_python_data_is_converted():
    sigma, t = rays()
    rgb = np.random.default_rng(5).uniform(size=sigma.shape + (3,))
    out = metal_ops.volume_render(sigma.astype(F64), rgb, t.astype(F64))
    assert out.rgb.dtype == tf.float64
    assert metal_ops.volume_render(sigma.tolist(), rgb.tolist(), t.tolist()).rgb.dtype == tf.float32
    assert metal_ops.robust_loss([0.5, 1.0], 1.0, 1.0).dtype == tf.float32
    assert metal_ops.trunc_exp(np.zeros(2, np.float16)).dtype == tf.float16


def test_layers_cast_their_input_as_dense_does():
    x64 = np.random.default_rng(6).uniform(size=(5, 3))
    mlp, dense = layers.FusedMLP(2, hidden_units=16), keras.layers.Dense(2)
    assert mlp(x64).dtype == dense(x64).dtype == tf.float32
    assert layers.HashEncoding(**SMALL_GRID)(x64).dtype == tf.float32
    with policy("mixed_float16"):
        encoding = layers.HashEncoding(**SMALL_GRID)
        assert encoding.input_dtype == "float32" and encoding(x64).dtype == tf.float16


# ---- the package's surface ---------------------------------------------------------------------

def test_modules_list_their_public_names():
    assert not {"tf", "np", "keras", "warnings"} & set(dir(losses))
    assert not {"tf", "np", "keras", "warnings"} & set(dir(layers))
    assert {"RobustLoss", "log_partition"} <= set(dir(losses))
    assert {"FusedMLP", "HashEncoding"} <= set(dir(layers))


def test_help_names_only_what_the_package_has():
    text = pydoc.render_doc(metal_ops.hash_encode, renderer=pydoc.plaintext)
    for name in ("per_level_scale_for",):
        if name in text:
            assert f"metal_ops.hash_encode's module function {name}" in " ".join(text.split()), text


def test_op_names_are_functions_and_their_modules_are_importable():
    """Documented design: `metal_ops.<op>` is the op's function (the module's
    name is taken by it); the module is `importlib.import_module("metal_ops.<op>")`
    or `from metal_ops.<op> import <name>`."""
    module = importlib.import_module("metal_ops.hash_encode")
    assert callable(metal_ops.hash_encode) and not isinstance(metal_ops.hash_encode, type(module))
    assert module.hash_encode is metal_ops.hash_encode and hasattr(module, "per_level_scale_for")


# ---- python -m metal_ops -----------------------------------------------------------------------

def _dash_m(*args):
    return subprocess.run([sys.executable, "-m", "metal_ops", *args], env=child_env(TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=300)


def test_python_dash_m_summary_json_help_and_version(capsys):
    import json

    from metal_ops import __main__ as main

    for flag, want in (("--help", "--json"), ("--version", f"metal_ops {metal_ops.__version__}\n")):
        with pytest.raises(SystemExit) as done:
            main.main([flag])
        assert done.value.code == 0 and want in capsys.readouterr().out
    out = _dash_m()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"metal_ops {metal_ops.__version__} ("), lines
    assert not out.stdout.lstrip().startswith("{") and "tensorflow_builds" not in out.stdout
    assert any(line.startswith("CPU kernels: ") for line in lines) and any(
        line.startswith("CUDA kernels: ") for line in lines)
    info = json.loads(_dash_m("--json").stdout)
    assert info["version"] == metal_ops.__version__ and "tensorflow_builds" not in info
    if sys.platform.startswith("linux"):
        gpu_path = next(line for line in lines if line.startswith("GPU path (Metal): "))
        assert re.fullmatch(r"GPU path \(Metal\): \S+ \([^()]*\)", gpu_path), gpu_path  # one plain reason


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_python_dash_m_usage_does_not_import_tensorflow(flag):
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "metal_ops", flag], env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and ("--json" in out.stdout if flag == "--help" else "metal_ops" in out.stdout)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    assert "metal_ops" in imported and "tensorflow" not in imported and "keras" not in imported


def test_cuda_kernels_of_a_source_build_are_reported():
    from metal_ops import __main__ as main

    assert main._cuda_line({"library": None}, ["cpu", "cuda"]).startswith("CUDA kernels: built into the op library")
    assert main._cuda_line({"library": None}, ["cpu"]) == "CUDA kernels: none in this build"


@pytest.mark.source_tree("docs/BUILDING.md")
def test_building_doc_names_the_offline_script_where_it_is():
    with open(os.path.join(ROOT, "docs", "BUILDING.md"), encoding="utf-8") as f:
        text = f.read()
    assert "`tools/tf_cuda_offline.sh`" not in text and os.path.exists(
        os.path.join(ROOT, "tools", "build", "tf_cuda_offline.sh"))


# ---- argument mistakes, each caught in Python before any op runs ---------------------------------

X3 = np.zeros((2, 3), np.float32)
SIGMA, T = np.ones((2, 3), np.float32), np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
RGB = np.ones((2, 3, 3), np.float32)
MARCH = (X3, X3 + 1, np.zeros(2, np.float32), np.ones(2, np.float32), np.zeros((1, 64), np.uint8),
         [0, 0, 0, 1, 1, 1])

MISTAKES = [
    (lambda: layers.FusedMLP(-3), ValueError, r"^FusedMLP: 'units' must be an integer >= 1, got -3$"),
    (lambda: layers.FusedMLP(3, hidden_units=0), ValueError, r"'hidden_units' must be an integer >= 1, got 0"),
    (lambda: layers.FusedMLP(3.5), TypeError, r"'units' must be an integer >= 1, got 3.5"),
    (lambda: layers.FusedMLP(3, hidden_layers="2"), TypeError, r"'hidden_layers' must be an integer >= 1, got '2'"),
    (lambda: layers.HashEncoding(num_levels=2.5), TypeError, r"^HashEncoding: 'num_levels' must be an integer, got 2.5"),
    (lambda: layers.HashEncoding(log2_hashmap_size="19"), TypeError, r"'log2_hashmap_size' must be an integer, got '19'"),
    (lambda: layers.HashEncoding(interpolation="cubic"), ValueError,
     r"'interpolation' must be one of 'linear', 'smoothstep', got 'cubic'"),
    (lambda: layers.HashEncoding(out_of_range="mirror"), ValueError,
     r"'out_of_range' must be one of 'clamp', 'wrap', 'zero', got 'mirror'"),
    (lambda: layers.HashEncoding(table_dtype="float64"), ValueError,
     r"'table_dtype' must be one of 'float32', 'float16', got 'float64'"),
    (lambda: layers.SHEncoding(degree=4.0), TypeError, r"^SHEncoding: 'degree' must be an integer, got 4.0"),
    (lambda: layers.SHEncoding(degree=5), ValueError, r"degree"),
    (lambda: layers.VolumeRender(validate=1), TypeError, r"'validate' must be True or False, got 1"),
    (lambda: layers.VolumeRender(early_termination="0.1"), TypeError, r"'early_termination' must be a number"),
    (lambda: metal_ops.sh_encode(X3, degree=4.0), TypeError, r"^sh_encode: 'degree' must be an integer, got 4.0"),
    (lambda: metal_ops.scene_contract(X3, norm="l1"), ValueError, r"'norm' must be one of 'l2', 'linf', got 'l1'"),
    (lambda: metal_ops.scene_contract(X3, norm=2), TypeError, r"'norm' must be one of 'l2', 'linf', got 2"),
    (lambda: metal_ops.zero_out(X3, preserve_index=-1), ValueError,
     r"^zero_out: 'preserve_index' must be an integer >= 0, got -1$"),
    (lambda: metal_ops.hash_encode(X3, np.zeros((64, 2), np.float32), num_levels=2.5), TypeError,
     r"^hash_encode: 'num_levels' must be an integer, got 2.5"),
    (lambda: metal_ops.hash_encode(X3, np.zeros((64, 2), np.float32), interpolation="nearest"), ValueError,
     r"^hash_encode: 'interpolation' must be one of 'linear', 'smoothstep', got 'nearest'"),
    (lambda: metal_ops.hash_grid_size(3, log2_hashmap_size="19"), TypeError, r"'log2_hashmap_size' must be an integer"),
    (lambda: metal_ops.volume_render(SIGMA, RGB, T, return_weights="yes"), TypeError,
     r"^volume_render: 'return_weights' must be True or False, got 'yes'"),
    (lambda: metal_ops.ray_march(*MARCH, grid_resolution=4.0, step_size=0.1), TypeError,
     r"^ray_march: 'grid_resolution' must be an integer, got 4.0"),
    (lambda: metal_ops.fused_mlp(X3, [np.zeros((3, 16), np.float32), np.zeros((16, 2), np.float32)],
                                 [np.zeros(16, np.float32), np.zeros(2, np.float32)], leaky_relu_alpha="0.1"),
     TypeError, r"'leaky_relu_alpha' must be a number"),
    (lambda: metal_ops.pack_occupancy(np.ones((1, 8, 8, 4))), ValueError,
     r"'grid' must be \[C, G, G, G\] or \[C, G\^3\] .*got shape \(1, 8, 8, 4\)"),
    (lambda: metal_ops.pack_occupancy(np.ones((1, 100))), ValueError, r"got shape \(1, 100\)"),
    (lambda: layers.FusedMLP(3, name="fused_mlp")(np.float32(1.0)), ValueError,
     r"Input 0.* of layer 'fused_mlp' is incompatible with the layer: expected min_ndim=2, found ndim=0"),
    (lambda: layers.FusedMLP(3, name="fused_mlp")(np.ones(4, np.float32)), ValueError,
     r"Input 0.* of layer 'fused_mlp' is incompatible with the layer: expected min_ndim=2, found ndim=1"),
    (lambda: layers.HashEncoding(**SMALL_GRID, name="hash_encoding")(np.float32(0.5)), ValueError,
     r"Input 0.* of layer 'hash_encoding' is incompatible with the layer: expected min_ndim=1, found ndim=0"),
    (lambda: layers.SHEncoding(name="sh_encoding")(X3[:, :2]), ValueError,
     r"Input 0.* of layer 'sh_encoding' is incompatible with the layer: expected axis -1 of input shape to have value 3"),
]


@pytest.mark.parametrize("call, error, pattern", MISTAKES, ids=[f"mistake{i}" for i in range(len(MISTAKES))])
def test_a_mistake_is_an_error_naming_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern) as e:
        call()
    assert "NodeDef" not in str(e.value) and "{{" not in str(e.value)


@pytest.mark.source_tree("docs/SCENE_CONTRACT.md")
def test_scene_contract_under_jit_compile_is_the_error_its_doc_names():
    """docs/SCENE_CONTRACT.md, "Backends": no XLA kernel; TensorFlow refuses the compiled function."""
    compiled = tf.function(lambda x: metal_ops.scene_contract(x), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)Detected unsupported operations.*MetalOpsSceneContract"):
        compiled(tf.ones([4, 3]))
    with open(os.path.join(ROOT, "docs", "SCENE_CONTRACT.md"), encoding="utf-8") as f:
        assert "Detected unsupported operations" in f.read()
