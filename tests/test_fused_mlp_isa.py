"""kernels/fused_mlp/fused_mlp.h's CPU bodies built for each instruction set this machine runs
(AVX-512, AVX2+FMA, the one-lane scalar fallback; the library itself is built for
one of them only), through the C ABI of tests/fused_mlp_isa/fused_mlp_isa.cc,
against the float64 NumPy reference of tests/test_fused_mlp.py. NEON is compiled
(not run) by `make metal-check`.
"""
import ctypes
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

from tests.activation_codes import activation_code
from tests.reference.fused_mlp import ALPHA
from tests.test_fused_mlp import CASES, make_net, reference

pytestmark = pytest.mark.source_tree("kernels/ and a compiler")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fused_mlp_isa", "fused_mlp_isa.cc")
ISAS = {"avx512": ["-mavx512f", "-mavx2", "-mfma"], "avx2": ["-mavx2", "-mfma"], "scalar": []}
CPU_FLAGS = {"avx512": "avx512f", "avx2": "avx2"}


def cpu_has(flag):
    try:
        with open("/proc/cpuinfo") as f:
            return flag in f.read().split()
    except OSError:
        return False


@pytest.fixture(scope="module", params=list(ISAS))
def lib(request, tmp_path_factory):
    isa = request.param
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("g++") is None:
        pytest.skip("builds the x86 variants with g++")
    if isa in CPU_FLAGS and not cpu_has(CPU_FLAGS[isa]):
        pytest.skip(f"this CPU has no {isa}")
    out = str(tmp_path_factory.mktemp("isa") / f"fused_mlp_{isa}.so")
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-I", ROOT, *ISAS[isa], "-o", out, SRC], check=True)
    so = ctypes.CDLL(out)
    so.fused_mlp_isa.restype = ctypes.c_char_p
    assert so.fused_mlp_isa().decode() == isa
    return so


F = ctypes.POINTER(ctypes.c_float)


def pointers(arrays):
    return (F * len(arrays))(*[a.ctypes.data_as(F) for a in arrays])


def run(so, x, kernels, biases, act, out_act, dy, threads):
    n, in_dim = x.shape
    width, out_dim, hidden = kernels[0].shape[1], kernels[-1].shape[1], len(kernels) - 1
    y = np.zeros((n, out_dim), np.float32)
    h = np.zeros((hidden, n, width), np.float32)
    dx = np.zeros_like(x)
    dk, db = [np.zeros_like(k) for k in kernels], [np.zeros_like(b) for b in biases]
    so.fused_mlp_isa_run(ctypes.c_int64(n), in_dim, width, hidden, out_dim, activation_code(act),
                         activation_code(out_act), ctypes.c_float(ALPHA), threads, x.ctypes.data_as(F),
                         pointers(kernels), pointers(biases), y.ctypes.data_as(F), h.ctypes.data_as(F),
                         dy.ctypes.data_as(F), dx.ctypes.data_as(F), pointers(dk), pointers(db))
    return y, [dx] + dk + db


# test_fused_mlp's cases, and rows around the 128-row block, wide outputs, none.
CASES = CASES + [
    (32, 64, 1, 16, "relu", "trunc_exp", 257),
    (33, 128, 1, 100, "relu", "sigmoid", 1000),
    (9, 16, 5, 17, "sigmoid", "sigmoid", 0),
]


@pytest.mark.parametrize("in_dim,width,hidden,out_dim,act,out_act,n", CASES)
def test_every_instruction_set_matches_numpy(lib, in_dim, width, hidden, out_dim, act, out_act, n):
    rng = np.random.default_rng(in_dim + width + n)
    x = rng.uniform(-1, 1, (n, in_dim)).astype(np.float32)
    kernels, biases = make_net(rng, in_dim, width, hidden, out_dim)
    dy = rng.standard_normal((n, out_dim)).astype(np.float32)
    y, grads = run(lib, x, kernels, biases, act, out_act, dy, threads=3)
    ry, rdx, rdk, rdb = reference(x, kernels, biases, act, out_act, dy)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ry).max(initial=0)))
    for got, want in zip(grads, [rdx] + rdk + rdb):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(want).max(initial=0)))


def test_weight_gradients_are_bitwise_the_same_for_any_shard_count(lib):
    rng = np.random.default_rng(7)
    kernels, biases = make_net(rng, 31, 64, 2, 3)
    x = rng.uniform(-1, 1, (20000, 31)).astype(np.float32)
    dy = rng.standard_normal((20000, 3)).astype(np.float32)
    runs = [run(lib, x, kernels, biases, "relu", "sigmoid", dy, threads) for threads in (1, 2, 5, 32)]
    for y, grads in runs[1:]:
        assert y.tobytes() == runs[0][0].tobytes()
        assert all(a.tobytes() == b.tobytes() for a, b in zip(grads, runs[0][1]))
