"""MetalOpsFusedConv2D: CPU kernel vs an independent NumPy reference, gradients,
empty tensors, bad inputs; the GPU kernel (Metal or CUDA) where TensorFlow has
that GPU.

The reference (tests/reference/fused_conv2d.py) is a direct loop over filter
taps written from the definition of the convolution, with the activations
from their textbook formulas, not from kernels/common/activations.h.
"""
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference.fused_conv2d import ref_conv, reference

pytestmark = pytest.mark.every_device

ATOL = 2e-4  # float32 accumulation over <= 3*3*8 taps of O(1) values


def data(shape_x, shape_w, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape_x).astype(np.float32)
    w = (rng.standard_normal(shape_w) / np.sqrt(np.prod(shape_w[:3]))).astype(np.float32)
    b = rng.standard_normal(shape_w[3]).astype(np.float32)
    return x, w, b


ACTS = [None, "relu", "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "swish"]
GEOMS = [
    # x shape, w shape, strides, padding, dilations
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), "SAME", (1, 1)),
    ((1, 9, 8, 5), (3, 2, 5, 6), (2, 1), "VALID", (1, 1)),
    ((2, 8, 8, 4), (1, 1, 4, 8), (1, 1), "SAME", (1, 1)),       # 1x1: matrix path
    ((1, 8, 9, 2), (1, 1, 2, 3), (2, 2), "VALID", (1, 1)),      # 1x1 strided
    ((1, 10, 10, 3), (3, 3, 3, 2), (1, 1), "SAME", (2, 2)),     # dilated
    ((1, 6, 7, 2), (3, 3, 2, 3), (1, 2), [[1, 2], [0, 1]], (1, 1)),  # explicit
]


@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: f"{g[0]}-{g[1]}-{g[2]}-{g[3]}-{g[4]}")
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("with_bias,with_residual", [(True, True), (True, False), (False, True), (False, False)])
def test_forward_matches_reference(geom, act, with_bias, with_residual):
    xs, ws, strides, padding, dil = geom
    x, w, b = data(xs, ws)
    z = ref_conv(x, w, strides, padding, dil)
    r = np.random.default_rng(1).standard_normal(z.shape).astype(np.float32) if with_residual else None
    out = metal_ops.fused_conv2d(x, w, bias=b if with_bias else None, residual=r, strides=strides,
                                 padding=padding, dilations=dil, activation=act, leaky_relu_alpha=0.1)
    want = reference(x, w, b if with_bias else None, r, strides, padding, dil, act, 0.1)
    assert out.shape == want.shape and out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy(), want, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("act", ["relu", "swish"])
def test_tf_function_and_larger_threaded_shape(act):
    # Large enough that Eigen splits the contraction over both cores and several
    # output blocks (exercises the block offsets of the residual in the output kernel).
    x, w, b = data((2, 20, 24, 16), (3, 3, 16, 40), seed=3)
    r = np.random.default_rng(4).standard_normal((2, 20, 24, 40)).astype(np.float32)
    f = tf.function(lambda x, w, b, r: metal_ops.fused_conv2d(x, w, b, r, activation=act))
    np.testing.assert_allclose(f(x, w, b, r).numpy(), reference(x, w, b, r, act=act), atol=5e-4, rtol=1e-4)
    x1, w1, b1 = data((2, 20, 24, 32), (1, 1, 32, 48), seed=5)
    r1 = np.random.default_rng(6).standard_normal((2, 20, 24, 48)).astype(np.float32)
    np.testing.assert_allclose(f(x1, w1, b1, r1).numpy(), reference(x1, w1, b1, r1, act=act), atol=5e-4, rtol=1e-4)


def test_matches_tensorflow_composite():
    x, w, b = data((2, 9, 9, 4), (3, 3, 4, 6), seed=7)
    r = np.random.default_rng(8).standard_normal((2, 5, 5, 6)).astype(np.float32)
    got = metal_ops.fused_conv2d(x, w, b, r, strides=2, padding="SAME", activation="relu")
    want = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 2, "SAME"), b) + r)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("geom", [((1, 5, 4, 2), (3, 3, 2, 3), (1, 1), "SAME", (1, 1)),
                                  ((1, 5, 5, 2), (3, 3, 2, 2), (1, 2), [[1, 0], [0, 1]], (1, 1)),
                                  ((2, 3, 4, 3), (1, 1, 3, 4), (1, 1), "VALID", (1, 1)),
                                  ((1, 5, 5, 2), (1, 1, 2, 3), (2, 2), "SAME", (1, 1))],
                         ids=["same", "explicit", "pointwise", "pointwise_strided"])
def test_gradients(act, geom):
    xs, ws, strides, padding, dil = geom
    x, w, b = data(xs, ws, seed=11)
    # Keep pre-activations away from the kinks of relu / relu6 / leaky_relu,
    # where finite differences are meaningless.
    z = ref_conv(x, w, strides, padding, dil) + b
    rng = np.random.default_rng(12)
    r = rng.standard_normal(z.shape).astype(np.float32)
    zr = z + r
    r = (r + np.where(np.abs(zr) < 0.05, 0.2, 0.0) + np.where(np.abs(zr - 6) < 0.05, 0.2, 0.0)).astype(np.float32)

    def f(x, w, b, r):
        return metal_ops.fused_conv2d(x, w, b, r, strides=strides, padding=padding, dilations=dil,
                                      activation=act, leaky_relu_alpha=0.3)

    theo, num = tf.test.compute_gradient(f, [x, w, b, r], delta=1e-3)
    for t, n in zip(theo, num):
        np.testing.assert_allclose(t, n, atol=3e-2, rtol=3e-2)


def test_gradient_matches_tensorflow_composite():
    x, w, b = data((2, 6, 6, 3), (3, 3, 3, 4), seed=21)
    r = np.random.default_rng(22).standard_normal((2, 6, 6, 4)).astype(np.float32)
    args = [tf.constant(v) for v in (x, w, b, r)]
    for act, tf_act in [("relu", tf.nn.relu), ("elu", tf.nn.elu), ("sigmoid", tf.sigmoid),
                        ("tanh", tf.tanh), ("swish", tf.nn.silu), ("relu6", tf.nn.relu6),
                        ("leaky_relu", lambda z: tf.nn.leaky_relu(z, 0.2))]:
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(args)
            ours = tf.reduce_sum(tf.sin(metal_ops.fused_conv2d(*args, activation=act)))
            theirs = tf.reduce_sum(tf.sin(tf_act(tf.nn.bias_add(tf.nn.conv2d(args[0], args[1], 1, "SAME"), args[2]) + args[3])))
        for g1, g2 in zip(tape.gradient(ours, args), tape.gradient(theirs, args)):
            np.testing.assert_allclose(g1.numpy(), g2.numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("xs,ws", [((2, 6, 5, 8), (1, 1, 8, 5)), ((0, 4, 4, 3), (1, 1, 3, 2)),
                                   ((2, 4, 4, 0), (1, 1, 0, 2)), ((2, 4, 4, 3), (1, 1, 3, 0))],
                         ids=["pointwise", "empty_batch", "empty_in_channels", "empty_out_channels"])
def test_pointwise_gradients_match_tensorflow(xs, ws):
    # 1x1 stride-1 filters take the matrix-product backward path.
    x, w, b = data(xs, ws, seed=41)
    r = np.random.default_rng(42).standard_normal(xs[:3] + ws[3:]).astype(np.float32)
    args = [tf.constant(v) for v in (x, w, b, r)]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(args)
        ours = tf.reduce_sum(tf.sin(metal_ops.fused_conv2d(*args, activation="tanh")))
        # einsum, not tf.nn.conv2d: TF's Conv2D gives a wrong shape for an empty batch.
        conv = tf.einsum("nhwc,cd->nhwd", args[0], args[1][0, 0])
        theirs = tf.reduce_sum(tf.sin(tf.tanh(conv + args[2] + args[3])))
    for g1, g2, a in zip(tape.gradient(ours, args), tape.gradient(theirs, args), args):
        assert g1.shape == a.shape
        np.testing.assert_allclose(g1.numpy(), g2.numpy(), atol=1e-4, rtol=1e-4)


def test_negative_leaky_alpha_gradient_uses_features():
    x, w, b = data((1, 5, 5, 2), (3, 3, 2, 3), seed=31)
    f = lambda x: metal_ops.fused_conv2d(x, w, b, activation="leaky_relu", leaky_relu_alpha=-0.5)
    theo, num = tf.test.compute_gradient(f, [x], delta=1e-3)
    np.testing.assert_allclose(theo[0], num[0], atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("xs,ws", [((0, 5, 5, 3), (3, 3, 3, 4)), ((2, 0, 5, 3), (1, 1, 3, 4)),
                                   ((2, 5, 5, 3), (3, 3, 3, 0))])
def test_empty_outputs(xs, ws):
    x, w, _ = data(xs, ws)
    out = metal_ops.fused_conv2d(x, w, np.ones(ws[3], np.float32), activation="relu")
    want = reference(x, w, np.ones(ws[3], np.float32), act="relu")
    assert out.shape == want.shape


def test_filter_larger_than_valid_input_gives_empty_output():
    # VALID with a filter larger than the input: output size (2 - 3) // 1 + 1 = 0.
    x, w, b = data((1, 2, 2, 3), (3, 3, 3, 4))
    out = metal_ops.fused_conv2d(x, w, b, padding="VALID", activation="relu")
    assert out.shape == (1, 0, 0, 4)


def test_zero_input_channels_applies_output_stage():
    x = np.zeros((1, 3, 3, 0), np.float32)
    w = np.zeros((3, 3, 0, 2), np.float32)
    b = np.array([-1.0, 2.0], np.float32)
    r = np.full((1, 3, 3, 2), 0.5, np.float32)
    out = metal_ops.fused_conv2d(x, w, b, r, activation="relu").numpy()
    np.testing.assert_allclose(out, np.broadcast_to([0.0, 2.5], (1, 3, 3, 2)))


BAD = [
    (dict(x=(2, 5, 5), w=(3, 3, 3, 4)), r"input must be 4-dimensional|must be rank 4"),
    (dict(x=(1, 5, 5, 3), w=(3, 3, 4)), r"filter must be 4-dimensional|must be rank 4"),
    (dict(x=(1, 5, 5, 3), w=(3, 3, 2, 4)), r"filter in_channels \(2\) must equal the input's channels \(3\)"),
    (dict(x=(1, 5, 5, 3), w=(3, 3, 3, 4), b=(5,)), r"bias must have shape \[4\]"),
    (dict(x=(1, 5, 5, 3), w=(3, 3, 3, 4), r=(1, 1, 5, 4)), r"residual must have the output's shape"),
    (dict(x=(1, 5, 5, 3), w=(3, 3, 3, 4), b=(4, 1)), r"bias must have shape \[4\]|must be rank 1"),
]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case,msg", BAD)
def test_bad_inputs_raise_invalid_argument(case, msg, mode):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(case["x"]).astype(np.float32)
    w = rng.standard_normal(case["w"]).astype(np.float32)
    b = rng.standard_normal(case["b"]).astype(np.float32) if "b" in case else None
    r = rng.standard_normal(case["r"]).astype(np.float32) if "r" in case else None
    if mode == "function":
        # Unknown shapes: the kernel's checks run, not the shape function's.
        spec = lambda a: tf.TensorSpec(None, tf.float32)
        args = [a for a in (x, w, b, r) if a is not None]
        keys = [k for k, a in zip("xwbr", (x, w, b, r)) if a is not None]

        @tf.function(input_signature=[spec(a) for a in args])
        def f(*a):
            kw = dict(zip(keys, a))
            return metal_ops.fused_conv2d(kw["x"], kw["w"], kw.get("b"), kw.get("r"), padding=case.get("padding", "SAME"))

        with pytest.raises(tf.errors.InvalidArgumentError, match=msg):
            f(*args)
    else:
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=msg):
            metal_ops.fused_conv2d(x, w, b, r, padding=case.get("padding", "SAME"))


def test_bad_attrs():
    x, w, b = data((1, 5, 5, 3), (3, 3, 3, 4))
    with pytest.raises(ValueError, match="activation"):
        metal_ops.fused_conv2d(x, w, activation="gelu")
    with pytest.raises(ValueError, match="data_format"):
        metal_ops.fused_conv2d(x, w, data_format="NCHW")
    with pytest.raises(ValueError, match="padding"):
        metal_ops.fused_conv2d(x, w, padding="FULL")
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="strides"):
        metal_ops.fused_conv2d(x, w, strides=[2, 1, 1, 1])
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="explicit_paddings"):
        metal_ops.fused_conv2d(x, w, padding=[[0, 0], [1, 1], [1, 1], [1, 0]])


def test_float64_rejected():
    x, w, b = data((1, 5, 5, 3), (3, 3, 3, 4))
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError)):
        metal_ops.fused_conv2d(x.astype(np.float64), w.astype(np.float64))


def _why_no_gpu_kernel():
    """None where the op runs on a GPU kernel here (MPSGraph on a Mac with
    tensorflow-metal, CUDA with TensorFlow's CUDA build), else why not."""
    import platform

    if platform.system() == "Darwin":
        if not tf.config.list_physical_devices("GPU"):
            return "TensorFlow sees no Metal GPU device"
        if "metal" not in metal_ops.build_info()["backends"]:
            return "the op library was built without the Metal backend"
        return None
    if not tf.test.is_built_with_cuda():
        return "no GPU kernel to test: not macOS with tensorflow-metal, and TensorFlow is not a CUDA build"
    if not tf.config.list_physical_devices("GPU"):
        return "TensorFlow's CUDA build sees no GPU"
    metal_ops.load_library()
    info = metal_ops.build_info()
    if "cuda" not in info["backends"] and not info["cuda"]["loaded"]:
        return f"the op library has no CUDA kernels here ({info['cuda']['reason']})"
    return None


_NO_GPU = _why_no_gpu_kernel()


@pytest.mark.parametrize("act", ["relu", "swish", "leaky_relu", "none"])
def test_gpu_kernel_matches_reference(act):
    """Forward against the reference and gradients against the CPU kernel's,
    computed on the GPU (the op placed there: no silent CPU fallback)."""
    import os

    if _NO_GPU is not None:
        if os.environ.get("METAL_OPS_REQUIRE_METAL") == "1":
            pytest.fail(_NO_GPU)
        pytest.skip(_NO_GPU)
    x, w, b = data((2, 9, 8, 3), (3, 3, 3, 5), seed=41)
    r = np.random.default_rng(42).standard_normal((2, 5, 4, 5)).astype(np.float32)
    with tf.device("/GPU:0"):
        args = [tf.constant(v) for v in (x, w, b, r)]
        with tf.GradientTape() as tape:
            tape.watch(args)
            y = metal_ops.fused_conv2d(*args, strides=2, activation=act)
            loss = tf.reduce_sum(tf.sin(y))
        grads = tape.gradient(loss, args)
    assert "GPU" in y.device
    # 1e-3: TF32 tensor cores (CUDA, TensorFlow's default) round the products' operands to 10 bits.
    np.testing.assert_allclose(y.numpy(), reference(x, w, b, r, (2, 2), act=act), atol=1e-3, rtol=1e-3)
    cpu_args = [tf.constant(v) for v in (x, w, b, r)]
    with tf.device("/CPU:0"), tf.GradientTape() as tape:
        tape.watch(cpu_args)
        loss = tf.reduce_sum(tf.sin(metal_ops.fused_conv2d(*cpu_args, strides=2, activation=act)))
    for g, c in zip(grads, tape.gradient(loss, cpu_args)):
        np.testing.assert_allclose(g.numpy(), c.numpy(), atol=1e-3, rtol=1e-3)


def test_cuda_kernel_follows_tensorflow_tf32_setting():
    """With TensorFlow's TF32 execution off, the CUDA kernel's GEMM keeps float32
    products: within float32 rounding of the reference over 288-term sums (TF32's
    10-bit operands would be tens of times further off)."""
    import platform

    if _NO_GPU is not None or platform.system() == "Darwin":
        pytest.skip(_NO_GPU or "the CUDA kernel's test (the Metal kernel has no TF32 mode)")
    x, w, b = data((4, 12, 11, 32), (3, 3, 32, 24), seed=43)
    was = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(False)
        with tf.device("/GPU:0"):
            y = metal_ops.fused_conv2d(tf.constant(x), tf.constant(w), bias=tf.constant(b), activation="elu")
        assert "GPU" in y.device
        np.testing.assert_allclose(y.numpy(), reference(x, w, b, act="elu"), atol=2e-5, rtol=2e-5)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(was)


def test_gpu_elu_keeps_small_negative_values():
    """ELU's negative side is expm1(z) on the GPU too (the MPSGraph kernel
    builds it from a polynomial and exp, as MPSGraph has no expm1): exp(z) - 1
    would give 0 or multiples of 2^-24 for these. A 1x1 filter of one 1.0
    makes z the input itself (TF32 off, so CUDA's GEMM keeps it exact)."""
    import os

    if _NO_GPU is not None:
        if os.environ.get("METAL_OPS_REQUIRE_METAL") == "1":
            pytest.fail(_NO_GPU)
        pytest.skip(_NO_GPU)
    z = -np.logspace(-9, 0, 64).astype(np.float32).reshape(1, 1, 64, 1)
    was = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(False)
        with tf.device("/GPU:0"):
            y = metal_ops.fused_conv2d(tf.constant(z), tf.ones([1, 1, 1, 1]), activation="elu")
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(was)
    assert "GPU" in y.device
    np.testing.assert_allclose(y.numpy(), np.expm1(z.astype(np.float64)), rtol=1e-5, atol=0)
