"""A fully fused multilayer perceptron (kernels/fused_mlp/fused_mlp_op.cc; tiny-cuda-nn's idea).

The formulas of the activations are kernels/common/activations.h; the checks
kernels/fused_mlp/fused_mlp.h. docs/FUSED_MLP.md describes the kernels.
"""
import keras
import tensorflow as tf

from metal_ops._args import float_tensor, number
from metal_ops._loader import load_library
from metal_ops.trunc_exp import trunc_exp

__all__ = ["HIDDEN_ACTIVATIONS", "OUTPUT_ACTIVATIONS", "fused_activation", "fused_mlp"]

# The names the op fuses: the values of its enum attributes 'activation' and
# 'output_activation' (kernels/fused_mlp/fused_mlp_op.cc), which refuse any other name.
HIDDEN_ACTIVATIONS = ("none", "relu", "leaky_relu", "sigmoid", "softplus")
OUTPUT_ACTIVATIONS = HIDDEN_ACTIVATIONS + ("trunc_exp",)


def fused_activation(activation):
    """The op's name for `activation`, or None when the op has no fused form of it.

    `activation`: None or "linear" (identity: "none"), a name of
    OUTPUT_ACTIVATIONS, or a callable: the Keras, tf.nn or tf.math function
    of a fused name (keras.activations.relu, tf.nn.relu, tf.math.sigmoid,
    ...; leaky_relu takes its slope from `leaky_relu_alpha`) or
    metal_ops.trunc_exp. Any other name or callable gives None.
    """
    if activation is None or activation == "linear" or activation is keras.activations.linear:
        return "none"
    if isinstance(activation, str):
        return activation if activation in OUTPUT_ACTIVATIONS else None
    if activation is trunc_exp:
        return "trunc_exp"
    name = getattr(activation, "__name__", None)
    if name in HIDDEN_ACTIVATIONS and any(
            activation is getattr(module, name, None) for module in (keras.activations, tf.nn, tf.math)):
        return name
    return None


def _activation_attr(activation, attr):
    name = fused_activation(activation)
    if name is None or (attr == "activation" and name not in HIDDEN_ACTIVATIONS):
        raise ValueError(f"fused_mlp: '{attr}' has no fused form for {activation!r}: give one of "
                         f"{OUTPUT_ACTIVATIONS if attr == 'output_activation' else HIDDEN_ACTIVATIONS}, "
                         f"by name or as the keras.activations / tf.nn function of that name")
    return name


def fused_mlp(x, kernels, biases, activation="relu", output_activation=None, leaky_relu_alpha=0.2, name=None):
    """y = f_out(h_L W_L + b_L) with h_l = f(h_{l-1} W_l + b_l), h_0 = x, in one op.

    Args:
      x: [N, in_dim] float32, or float16 (GPU kernels only), in_dim in [1, 128].
      kernels: list of matrices in Keras Dense layout: [in_dim, W], then
        [W, W] per further hidden layer, then [W, out_dim]; W in {16, 32, 64,
        128}, 1 to 8 hidden layers, out_dim in [1, 128].
      biases: one vector per kernel ([W] ..., [out_dim]).
      kernels and biases have x's dtype (the dtype rule, README "Dtypes":
      another dtype is a TypeError naming the argument).
      activation: hidden activation, one of HIDDEN_ACTIVATIONS, by name or
        as a callable (`fused_activation`); None or "linear" is "none".
      output_activation: None / "none" or one of OUTPUT_ACTIVATIONS, likewise
        ("trunc_exp", or metal_ops.trunc_exp: exp with the gradient clamped to
        exp(+-15), as NeRF densities use).
      leaky_relu_alpha: the slope of leaky_relu below 0, in [0, 1).

    Returns y [N, out_dim] in x's dtype. Differentiable w.r.t. x, every
    kernel and every bias (one fused backward op, deterministic). A NaN in a
    row of x gives NaN in that row of y, as the Dense stack does. Bad shapes,
    names and attributes raise the op's errors, naming the argument.
    """
    with tf.name_scope(name or "fused_mlp"):
        kernels, biases = list(kernels), list(biases)
        if len(biases) != len(kernels):
            raise ValueError(f"fused_mlp: 'biases' must hold one vector per kernel ({len(kernels)}), "
                             f"got {len(biases)}")
        x = float_tensor("fused_mlp", "x", x, (tf.float32, tf.float16))
        kernels = [float_tensor("fused_mlp", f"kernels[{i}]", k, (x.dtype,), like="x") for i, k in enumerate(kernels)]
        biases = [float_tensor("fused_mlp", f"biases[{i}]", b, (x.dtype,), like="x") for i, b in enumerate(biases)]
        y, _ = load_library().metal_ops_fused_mlp(
            x, kernels, biases, activation=_activation_attr(activation, "activation"),
            output_activation=_activation_attr(output_activation, "output_activation"),
            leaky_relu_alpha=number("fused_mlp", "leaky_relu_alpha", leaky_relu_alpha))
        return y


@tf.RegisterGradient("MetalOpsFusedMLP")
def _fused_mlp_grad(op, grad_y, unused_grad_hidden):
    num = op.get_attr("N")
    x = op.inputs[0]
    kernels = list(op.inputs[1:1 + num])
    grads = load_library().metal_ops_fused_mlp_grad(
        grad_y, x, kernels, op.outputs[0], op.outputs[1], activation=op.get_attr("activation"),
        output_activation=op.get_attr("output_activation"), leaky_relu_alpha=op.get_attr("leaky_relu_alpha"))
    grad_x, grad_kernels, grad_biases = grads
    return [grad_x] + list(grad_kernels) + list(grad_biases)


def selftest_cases(cpu_only=False):
    """The self-test's cases (python -m metal_ops.selftest). float16, which has
    no CPU kernel, is compared with a float64 NumPy model on the same float16
    inputs, elementwise within the error bound of its float16 kernels
    (docs/FUSED_MLP_GPU.md, "float16 error bound"; selftest_float16_check)."""
    import numpy as np

    from metal_ops import selftest

    rng, out = selftest.rng("fused_mlp"), []
    for dtype, tol, n, in_dim, width, hidden, out_dim, act, out_act in [
            (np.float32, 1e-3, 1001, 31, 64, 2, 3, "relu", "sigmoid"),
            (np.float32, 1e-3, 0, 31, 64, 2, 3, "relu", "sigmoid"),
            (np.float32, 1e-3, 333, 5, 16, 3, 1, "softplus", "none"),
            (np.float32, 1e-3, 77, 128, 128, 2, 128, "leaky_relu", "relu"),
            (np.float16, 1.0, 1001, 31, 64, 2, 3, "relu", "none"),
            (np.float32, 1e-3, 65536, 32, 64, 2, 16, "relu", "trunc_exp")]:
        dims = [in_dim] + [width] * hidden + [out_dim]
        ws = [(rng.uniform(-1, 1, (a, b)) / np.sqrt(a)).astype(dtype) for a, b in zip(dims[:-1], dims[1:])]
        bs = [rng.uniform(-0.1, 0.1, b).astype(dtype) for b in dims[1:]]
        x = rng.uniform(-1, 1, (n, in_dim)).astype(dtype)
        layers = hidden + 1
        out.append(selftest.case("fused_mlp", f"n={n} {in_dim}-{width}x{hidden}-{out_dim} {act}/{out_act}", dtype,
                                 [x] + ws + bs,
                                 lambda a, *wb, k=layers, f=act, g=out_act: fused_mlp(
                                     a, list(wb[:k]), list(wb[k:]), activation=f, output_activation=g), tol,
                                 {"activation": act, "output_activation": out_act},
                                 check=selftest_float16_check if dtype == np.float16 else None))
    return out


def selftest_float16_check(case, values, grads):
    """(error, note) of a float16 self-test case: the largest |device -
    reference| / bound against the float64 model and the bound of
    metal_ops._reference.fused_mlp (tolerance 1)."""
    import math

    import numpy as np

    from metal_ops import selftest
    from metal_ops._reference import fused_mlp as reference

    layers = (len(case.inputs) - 1) // 2
    x, ws, bs = case.inputs[0], case.inputs[1:1 + layers], case.inputs[1 + layers:]
    names = ["output 0"] + [f"gradient of input {i}" for i in range(1 + 2 * layers)]
    if len(values) != 1 or len(grads) != 1 + 2 * layers:
        return math.inf, f"{len(values)} outputs and {len(grads)} gradients on the device"
    if any(g is None for g in grads):
        return math.inf, f"{names[1 + [g is None for g in grads].index(True)]}: missing on the device"
    # The loss casts y to float32: its gradient reaches the op as the cotangent rounded to float16.
    dy = selftest.cotangents(case, [np.shape(values[0])])[0].astype(np.float16)
    bound = reference.float16_bound(x, ws, bs, dy, case.attrs["activation"], case.attrs["output_activation"])
    ratios = bound.ratios(y=values[0], dx=grads[0], dws=grads[1:1 + layers], dbs=grads[1 + layers:])
    worst = max(range(len(ratios)), key=lambda i: ratios[i][1])
    return ratios[worst][1], f"largest in {names[worst]} (error / float16 bound)"
