"""ZeroOut in NumPy: zeros of the input's shape, the element at flat index
preserve_index kept."""
import numpy as np


def zero_out(x, preserve_index):
    flat = np.asarray(x).reshape(-1)
    out = np.zeros_like(flat)
    if flat.size:
        out[preserve_index] = flat[preserve_index]
    return out.reshape(np.shape(x))


def selftest(inputs, attrs):
    """A self-test case (metal_ops.selftest) from its inputs and attributes: the
    outputs, and the gradients of sum(cotangent * output) as a function of the
    cotangents."""
    keep = attrs["preserve_index"]
    return [zero_out(inputs[0], keep)], lambda cots: [zero_out(cots[0], keep)]
