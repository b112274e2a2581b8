"""metal_ops.fused_mlp (MetalOpsFusedMLP / MetalOpsFusedMLPGrad) on the CPU.

Against an independent NumPy reference (float64), Keras Dense stacks with the
same weights, tf.test.compute_gradient; every hidden width, depths 1..8, every
activation, odd input/output widths, empty batches; determinism across thread
counts; bad shapes, dtypes and attributes.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests import devices
from tests.reference.fused_mlp import act, dact, tf32_bound

pytestmark = pytest.mark.every_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- independent reference ---------------------------------------------------------------

def reference(x, kernels, biases, hidden_act, out_act, dy):
    """y and the gradients of sum(dy * y) for x, kernels, biases (float64)."""
    hs, zs = [np.asarray(x, np.float64)], []
    for l, (w, b) in enumerate(zip(kernels, biases)):
        z = hs[-1] @ np.asarray(w, np.float64) + np.asarray(b, np.float64)
        zs.append(z)
        hs.append(act(z, out_act if l == len(kernels) - 1 else hidden_act))
    dz = np.asarray(dy, np.float64) * dact(zs[-1], out_act)
    dks, dbs = [None] * len(kernels), [None] * len(kernels)
    for l in range(len(kernels) - 1, -1, -1):
        dks[l] = hs[l].T @ dz
        dbs[l] = dz.sum(0)
        dh = dz @ np.asarray(kernels[l], np.float64).T
        if l:
            dz = dh * dact(zs[l - 1], hidden_act)
    return hs[-1], dh, dks, dbs


def make_net(rng, in_dim, width, hidden, out_dim, scale=None):
    dims = [in_dim] + [width] * hidden + [out_dim]
    kernels = [(rng.standard_normal((a, b)) * (scale or 1.0 / np.sqrt(a))).astype(np.float32)
               for a, b in zip(dims[:-1], dims[1:])]
    biases = [(0.1 * rng.standard_normal(b)).astype(np.float32) for b in dims[1:]]
    return kernels, biases


def run(x, kernels, biases, act, out_act, dy):
    xt = tf.constant(x)
    ks = [tf.constant(k) for k in kernels]
    bs = [tf.constant(b) for b in biases]
    with tf.GradientTape() as tape:
        tape.watch([xt] + ks + bs)
        y = metal_ops.fused_mlp(xt, ks, bs, activation=act, output_activation=out_act)
        loss = tf.reduce_sum(y * tf.constant(dy))
    grads = tape.gradient(loss, [xt] + ks + bs)
    return y.numpy(), [g.numpy() for g in grads]


CASES = [  # in, width, hidden layers, out, hidden activation, output activation, rows
    (31, 64, 2, 3, "relu", "sigmoid", 300),     # the NeRF colour network
    (32, 64, 1, 16, "relu", "trunc_exp", 129),  # the NeRF density network
    (3, 16, 1, 1, "softplus", "none", 7),
    (5, 32, 3, 7, "leaky_relu", "softplus", 256),
    (17, 128, 2, 5, "sigmoid", "relu", 130),
    (1, 16, 8, 2, "none", "leaky_relu", 64),
    (128, 32, 4, 128, "relu", "none", 40),
]


@pytest.mark.parametrize("in_dim,width,hidden,out_dim,act,out_act,n", CASES)
def test_matches_numpy_reference(in_dim, width, hidden, out_dim, act, out_act, n):
    rng = np.random.default_rng(in_dim * 1000 + width + hidden)
    x = rng.uniform(-1, 1, (n, in_dim)).astype(np.float32)
    kernels, biases = make_net(rng, in_dim, width, hidden, out_dim)
    dy = rng.standard_normal((n, out_dim)).astype(np.float32)
    y, grads = run(x, kernels, biases, act, out_act, dy)
    ry, rdx, rdk, rdb = reference(x, kernels, biases, act, out_act, dy)
    scale = max(1.0, np.abs(ry).max())
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5 * scale)
    for got, want in zip(grads, [rdx] + rdk + rdb):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(want).max()))


HIDDEN_ACTS = ["none", "relu", "leaky_relu", "sigmoid", "softplus"]
OUT_ACTS = HIDDEN_ACTS + ["trunc_exp"]


@pytest.mark.parametrize("width", [16, 32, 64, 128])
@pytest.mark.parametrize("hidden", range(1, 9))
def test_every_width_and_depth(width, hidden):
    # Activations, odd input/output widths and row counts (around the CPU's
    # 128-row block) cycle with the case, so every one meets every width.
    case = width // 16 + hidden
    in_dim, out_dim = [1, 3, 31, 17, 64, 128, 5][case % 7], [1, 3, 16, 7, 33, 128][case % 6]
    act, out_act = HIDDEN_ACTS[case % 5], OUT_ACTS[(case + hidden) % 6]
    n = [1, 127, 128, 129, 300, 513][case % 6]
    rng = np.random.default_rng(case)
    x = rng.uniform(-1, 1, (n, in_dim)).astype(np.float32)
    kernels, biases = make_net(rng, in_dim, width, hidden, out_dim)
    dy = rng.standard_normal((n, out_dim)).astype(np.float32)
    y, grads = run(x, kernels, biases, act, out_act, dy)
    ry, rdx, rdk, rdb = reference(x, kernels, biases, act, out_act, dy)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ry).max()))
    for got, want in zip(grads, [rdx] + rdk + rdb):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("hidden", [1, 8])
def test_matches_a_keras_dense_stack_with_the_same_weights(hidden):
    import keras

    rng = np.random.default_rng(hidden)
    kernels, biases = make_net(rng, 31, 64, hidden, 3)
    layers = [keras.layers.Dense(64, activation="relu") for _ in range(hidden)] + [
        keras.layers.Dense(3, activation="sigmoid")]
    model = keras.Sequential([keras.Input((31,))] + layers)
    model.set_weights([w for pair in zip(kernels, biases) for w in pair])
    x = tf.constant(rng.uniform(-1, 1, (200, 31)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        y_fused = metal_ops.fused_mlp(x, model.trainable_weights[0::2], model.trainable_weights[1::2],
                                      activation="relu", output_activation="sigmoid")
        y_dense = model(x)
        l_fused, l_dense = tf.reduce_sum(y_fused ** 2), tf.reduce_sum(y_dense ** 2)
    # Same weights, float32 both ways; only the summation order differs.
    np.testing.assert_allclose(y_fused.numpy(), y_dense.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(tape.gradient(l_fused, model.trainable_weights), tape.gradient(l_dense, model.trainable_weights)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def test_compute_gradient():
    rng = np.random.default_rng(5)
    kernels, biases = make_net(rng, 4, 16, 2, 3, scale=0.5)
    x = rng.uniform(-1, 1, (6, 4)).astype(np.float32)

    def f(x, k0, k1, k2, b0, b1, b2):
        return metal_ops.fused_mlp(x, [k0, k1, k2], [b0, b1, b2], activation="softplus", output_activation="sigmoid")

    theoretical, numerical = tf.test.compute_gradient(f, [x] + kernels + biases, delta=1e-2)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, atol=2e-3, rtol=2e-2)


def test_empty_batch_and_tf_function():
    rng = np.random.default_rng(1)
    kernels, biases = make_net(rng, 5, 32, 2, 4)
    x = tf.zeros((0, 5))
    y, grads = run(x.numpy(), kernels, biases, "relu", "none", np.zeros((0, 4), np.float32))
    assert y.shape == (0, 4) and grads[0].shape == (0, 5)
    assert all(np.all(g == 0) for g in grads[1:])
    f = tf.function(lambda v: metal_ops.fused_mlp(v, kernels, biases))
    xs = rng.uniform(size=(9, 5)).astype(np.float32)
    np.testing.assert_allclose(f(xs).numpy(), metal_ops.fused_mlp(xs, kernels, biases).numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("width,hidden", [(16, 1), (64, 3), (128, 2)])
def test_outputs_the_graph_never_reads(tf_device, width, hidden):
    """In a tf.function the kernels may leave out what nothing consumes: the
    saved activations of an inference call, a gradient no one asked for (the
    CPU and CUDA kernels do). What is asked for stays right."""
    rng = np.random.default_rng(width + hidden)
    n, in_dim, out_dim = 300, 17, 5
    x = rng.uniform(-1, 1, (n, in_dim)).astype(np.float32)
    kernels, biases = make_net(rng, in_dim, width, hidden, out_dim)
    dy = rng.standard_normal((n, out_dim)).astype(np.float32)
    ry, rdx, rdk, rdb = reference(x, kernels, biases, "relu", "none", dy)
    with tf.device(tf_device):
        xt, dyt = tf.constant(x), tf.constant(dy)
        ks, bs = [tf.Variable(k) for k in kernels], [tf.Variable(b) for b in biases]

        @tf.function
        def infer(v):
            return metal_ops.fused_mlp(v, ks, bs)

        def grads_of(with_x, variables):
            @tf.function
            def step(v):
                with tf.GradientTape() as tape:
                    tape.watch(v)
                    loss = tf.reduce_sum(metal_ops.fused_mlp(v, ks, bs) * dyt)
                return tape.gradient(loss, ([v] if with_x else []) + variables)
            return [g.numpy() for g in step(xt)]

        y = infer(xt).numpy()
        only_weights = grads_of(False, ks)
        only_x_and_biases = grads_of(True, bs)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ry).max()))
    for got, want in zip(only_weights + only_x_and_biases, rdk + [rdx] + rdb):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_cuda_inference_saves_no_activations(tf_device):
    """An inference tf.function on a CUDA GPU allocates no saved activations:
    its peak memory stays well below what they would take."""
    if tf_device != "/GPU:0" or devices.gpu_is_metal():
        pytest.skip("the CUDA kernels' inference path (runs on a CUDA GPU)")
    rng = np.random.default_rng(7)
    n, width, hidden = 1 << 16, 128, 8
    kernels, biases = make_net(rng, 16, width, hidden, 16)
    saved_bytes = hidden * n * width * 4
    with tf.device(tf_device):
        x = tf.constant(rng.uniform(-1, 1, (n, 16)).astype(np.float32))
        ks, bs = [tf.constant(k) for k in kernels], [tf.constant(b) for b in biases]
        infer = tf.function(lambda v: metal_ops.fused_mlp(v, ks, bs))
        infer(x[:8]).numpy()
        tf.config.experimental.reset_memory_stats(tf_device.strip("/"))
        y = infer(x).numpy()
        peak = tf.config.experimental.get_memory_info(tf_device.strip("/"))["peak"]
    ry = reference(x.numpy(), kernels, biases, "relu", "none", np.zeros((n, 16)))[0]
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ry).max()))
    assert peak < saved_bytes / 2, f"peak {peak} B during inference; the saved activations alone are {saved_bytes} B"

DETERMINISM = """
import sys
import numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
import metal_ops
from tests.test_fused_mlp import make_net
rng = np.random.default_rng(0)
kernels, biases = make_net(rng, 31, 64, 2, 3)
x = tf.constant(rng.uniform(-1, 1, (20000, 31)).astype(np.float32))
ks, bs = [tf.constant(k) for k in kernels], [tf.constant(b) for b in biases]
with tf.GradientTape() as t:
    t.watch(ks + bs)
    loss = tf.reduce_sum(metal_ops.fused_mlp(x, ks, bs, output_activation="sigmoid") ** 2)
g = t.gradient(loss, ks + bs)
sys.stdout.write(" ".join(v.numpy().tobytes().hex()[:64] + str(float(np.sum(v.numpy(), dtype=np.float64))) for v in g))
"""


def test_weight_gradients_are_bitwise_the_same_for_any_thread_count():
    outs = {}
    for threads in (1, 2):
        r = subprocess.run([sys.executable, "-c", DETERMINISM, str(threads)], cwd=ROOT, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        outs[threads] = r.stdout
    assert outs[1] == outs[2]


@pytest.mark.parametrize("act_name,out_act", [("relu", "none"), ("softplus", "sigmoid")])
def test_cuda_float32_follows_tensorflow_tf32_setting(tf_device, act_name, out_act):
    """On a CUDA GPU, float32 runs on TF32 tensor cores while TensorFlow allows
    TF32 for its float32 products and NVIDIA_TF32_OVERRIDE (0 here for the
    other tests: tests/conftest.py) does not forbid it: every result within the
    TF32 error bound of the float64 reference (docs/FUSED_MLP_GPU.md) and not
    the exact one. TF32 off either way: the exact path, bitwise the same."""
    if tf_device != "/GPU:0" or devices.gpu_is_metal():
        pytest.skip("the CUDA kernel's float32 TF32 path (runs on a CUDA GPU)")
    rng = np.random.default_rng(23)
    n, depth = 3000, 3
    x = rng.uniform(-1, 1, (n, 32)).astype(np.float32)
    kernels, biases = make_net(rng, 32, 64, depth, 16)
    dy = rng.standard_normal((n, 16)).astype(np.float32)
    assert "GPU" in metal_ops.fused_mlp(x[:4], kernels, biases).device
    env, allowed = os.environ.get("NVIDIA_TF32_OVERRIDE"), tf.config.experimental.tensor_float_32_execution_enabled()

    def run_with(tf32, override):
        if override is None:
            os.environ.pop("NVIDIA_TF32_OVERRIDE", None)
        else:
            os.environ["NVIDIA_TF32_OVERRIDE"] = override
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        y, grads = run(x, kernels, biases, act_name, out_act, dy)
        return [y] + grads

    try:
        off = run_with(False, None)
        overridden = run_with(True, "0")
        on = run_with(True, None)
    finally:
        if env is None:
            os.environ.pop("NVIDIA_TF32_OVERRIDE", None)
        else:
            os.environ["NVIDIA_TF32_OVERRIDE"] = env
        tf.config.experimental.enable_tensor_float_32_execution(allowed)
    for a, b in zip(off, overridden):
        assert np.array_equal(a, b), "TF32 off and NVIDIA_TF32_OVERRIDE=0 must both run the exact path"
    ry = reference(x, kernels, biases, act_name, out_act, dy)[0]
    np.testing.assert_allclose(off[0], ry, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ry).max()))
    bound = tf32_bound(x, kernels, biases, dy, act_name, out_act)
    k = depth + 1
    ratios = bound.ratios(y=on[0], dx=on[1], dws=on[2:2 + k], dbs=on[2 + k:])
    bad = [(name, r) for name, r in ratios if not r <= 1.0]
    assert not bad, f"TF32 results outside the TF32 error bound: {bad}"
    assert not np.array_equal(on[0], off[0]), "TF32 allowed, yet the exact path ran"


# ---- bad input -----------------------------------------------------------------------------

def bad(kernels=None, biases=None, x=None, **attrs):
    rng = np.random.default_rng(2)
    k, b = make_net(rng, 4, 16, 1, 2)
    return metal_ops.fused_mlp(np.ones((3, 4), np.float32) if x is None else x, kernels or k, biases or b, **attrs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kernels=[np.ones((4, 16), np.float32)], biases=[np.ones(16, np.float32)]),
     r"'kernels' must hold 2 to 9 matrices"),
    (dict(kernels=[np.ones((4, 24), np.float32), np.ones((24, 2), np.float32)],
          biases=[np.ones(24, np.float32), np.ones(2, np.float32)]), r"hidden width .* must be 16, 32, 64 or 128, got 24"),
    (dict(kernels=[np.ones((4, 16), np.float32), np.ones((15, 2), np.float32)]),
     r"'kernels\[1\]' must be \[16, 2\]"),
    (dict(biases=[np.ones(16, np.float32), np.ones(3, np.float32)]), r"'biases\[1\]' must be \[2\], got \[3\]"),
    (dict(x=np.ones((3, 5), np.float32)), r"'kernels\[0\]' must be \[5, 16\]"),
    (dict(activation="tanh"), r"activation.*tanh"),
    (dict(activation="trunc_exp"), r"activation.*trunc_exp"),
    (dict(output_activation="swish"), r"output_activation.*swish"),
    (dict(activation=tf.nn.gelu), r"'activation' has no fused form"),
    (dict(leaky_relu_alpha=-0.1), r"'leaky_relu_alpha' must be in \[0, 1\)"),
])
def test_bad_input_names_the_argument(kwargs, match):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
        bad(**kwargs)


@pytest.mark.cpu_semantics("float16 runs on GPUs; the CPU kernel refuses it")
def test_float16_on_cpu_says_where_it_runs():
    rng = np.random.default_rng(3)
    k, b = make_net(rng, 4, 16, 1, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="float16 runs on GPUs"):
        metal_ops.fused_mlp(np.ones((3, 4), np.float16), [v.astype(np.float16) for v in k],
                            [v.astype(np.float16) for v in b])


def _graph_def_with_fused_mlp(activation, output_activation, x, kernels, biases):
    """A GraphDef as any version of the op writes it: the activations are
    string values in the node's attributes."""
    graph_def = tf.compat.v1.GraphDef()
    names = []
    for i, value in enumerate([x] + list(kernels) + list(biases)):
        node = graph_def.node.add(name=f"c{i}", op="Const")
        node.attr["dtype"].type = tf.float32.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
        names.append(node.name)
    node = graph_def.node.add(name="mlp", op="MetalOpsFusedMLP", input=names)
    node.attr["N"].i = len(kernels)
    node.attr["T"].type = tf.float32.as_datatype_enum
    node.attr["activation"].s = activation.encode()
    node.attr["output_activation"].s = output_activation.encode()
    node.attr["leaky_relu_alpha"].f = 0.2
    return graph_def


def test_saved_graphs_with_activation_strings_load():
    """'activation' and 'output_activation' are enum attributes, which a graph
    stores as strings, as it did when they were free string attributes: a
    GraphDef written by either loads and runs; a name the op lacks is refused
    when the graph is imported, naming the attribute."""
    metal_ops.load_library()
    rng = np.random.default_rng(11)
    k, b = make_net(rng, 4, 16, 1, 2)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    graph_def = _graph_def_with_fused_mlp("sigmoid", "softplus", x, k, b)
    # Both on the CPU: the imported graph has no device, and the comparison is
    # of the attributes' meaning, not of two devices' rounding.
    with tf.device("/CPU:0"):
        run = tf.compat.v1.wrap_function(
            lambda: tf.graph_util.import_graph_def(graph_def, return_elements=["mlp:0"]), [])
        got = run()[0].numpy()
        want = metal_ops.fused_mlp(x, k, b, activation="sigmoid", output_activation="softplus")
    np.testing.assert_array_equal(got, want.numpy())
    bad = _graph_def_with_fused_mlp("tanh", "none", x, k, b)
    with pytest.raises(ValueError, match="activation.*tanh"):
        tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(bad, return_elements=["mlp:0"]), [])


def test_python_activation_names_are_the_op_s_enum():
    """metal_ops.fused_mlp's HIDDEN_ACTIVATIONS / OUTPUT_ACTIVATIONS (which map
    callables and pick what the layer applies after the op) are the values of
    the op's enum attributes."""
    from metal_ops.fused_mlp import HIDDEN_ACTIVATIONS, OUTPUT_ACTIVATIONS
    with tf.Graph().as_default() as graph:
        x = tf.zeros([1, 4])
        k, b = make_net(np.random.default_rng(0), 4, 16, 1, 2)
        tf.gradients(metal_ops.fused_mlp(x, k, b), x)
        ops = {op.type: op for op in graph.get_operations()}
    for op_name in ("MetalOpsFusedMLP", "MetalOpsFusedMLPGrad"):
        attrs = {a.name: tuple(v.decode() for v in a.allowed_values.list.s) for a in ops[op_name].op_def.attr}
        assert attrs["activation"] == HIDDEN_ACTIVATIONS and attrs["output_activation"] == OUTPUT_ACTIVATIONS
