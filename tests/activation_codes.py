"""mo::Activation's codes by the op attribute's names, read from
kernels/common/activations.h (kActivationNames: a name's code is its index),
for the C ABIs that take the code: the per-ISA FusedMLP builds
(tests/fused_mlp_isa), the MSL shim and the CUDA harness, called by the tests
and benchmarks/cuda. Reads the source tree at the first call."""
import functools
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "kernels", "common", "activations.h")


@functools.lru_cache(maxsize=None)
def codes():
    """{name: code} of every activation."""
    with open(HEADER, encoding="utf-8") as f:
        table = re.search(r"kActivationNames\[\]\s*=\s*\{(.*?)\};", f.read(), re.S)
    if table is None:
        raise RuntimeError(f"{HEADER} has no kActivationNames table")
    return {name: i for i, name in enumerate(re.findall(r'"(\w+)"', table.group(1)))}


def activation_code(name):
    """The code of the activation named `name` ("none", "relu", ...)."""
    return codes()[name]
