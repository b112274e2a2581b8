"""The ARM NEON path of kernels/cpu/simd.h (what a Mac's CPU and every Linux
arm64 machine run), executed here: the TF-free FusedMLP core
(tests/fused_mlp_isa/fused_mlp_isa.cc) in a static executable
(tests/neon/fused_mlp_main.cc), cross-compiled with Debian's
aarch64-linux-gnu-g++ and run under qemu-aarch64, against the float64 NumPy
reference of tests/test_fused_mlp.py. The same executable built for this
machine (the one-lane scalar fallback) checks the request/response format.

`make test` installs the tools first (tools/install_cross_tools.sh); without
them these tests skip and say which is missing, or fail in CI (required()). Emulated timings mean nothing:
correctness only.
"""
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

from tests.reference.fused_mlp import ALPHA
from tests.test_fused_mlp import make_net, reference
from tests.test_fused_mlp_isa import ACTIVATIONS, CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = [os.path.join(ROOT, "tests", "neon", "fused_mlp_main.cc"),
           os.path.join(ROOT, "tests", "fused_mlp_isa", "fused_mlp_isa.cc")]
CROSS_CXX = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"
INSTALL = "tools/install_cross_tools.sh (apt-get install g++-aarch64-linux-gnu qemu-user)"


def required():
    """Whether missing cross tools fail these tests instead of skipping them: in
    CI (CI=true, as most CI services set it; .ci/run sets METAL_OPS_REQUIRE_NEON=1)."""
    return (os.environ.get("METAL_OPS_REQUIRE_NEON") == "1" or
            os.environ.get("CI", "").lower() in ("1", "true", "yes"))


def build(cxx, out, flags=()):
    # -static: no aarch64 sysroot or loader needed at run time under qemu.
    subprocess.run([cxx, "-std=c++17", "-O2", "-static", "-I", ROOT, *flags, "-o", out, *SOURCES], check=True,
                   capture_output=True, text=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def neon(tmp_path_factory):
    if not os.path.exists(SOURCES[1]):
        pytest.skip("needs the source tree (tests/fused_mlp_isa, kernels/): run from a clone")
    missing = [t for t in (CROSS_CXX, QEMU) if shutil.which(t) is None]
    if missing:
        why = f"{' and '.join(missing)} not installed: the NEON path cannot run here ({INSTALL})"
        if required():
            pytest.fail(f"{why}; METAL_OPS_REQUIRE_NEON=1 or CI=true: the NEON tests must run")
        pytest.skip(why)
    exe = build(CROSS_CXX, str(tmp_path_factory.mktemp("neon") / "fused_mlp_neon"))
    return [QEMU, exe]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if not os.path.exists(SOURCES[1]) or shutil.which("g++") is None:
        pytest.skip("needs the source tree and g++")
    # No -m flags: on x86-64 that is the scalar fallback of simd.h.
    return [build("g++", str(tmp_path_factory.mktemp("host") / "fused_mlp_host"))]


def run(cmd, tmp_path, x, kernels, biases, act, out_act, dy, threads=3):
    n, in_dim = x.shape
    width, out_dim, hidden = kernels[0].shape[1], kernels[-1].shape[1], len(kernels) - 1
    request, response = tmp_path / "request.bin", tmp_path / "response.bin"
    header = np.array([n, in_dim, width, hidden, out_dim, ACTIVATIONS[act], ACTIVATIONS[out_act], threads, 0],
                      np.int64)
    with open(request, "wb") as f:
        f.write(header.tobytes() + np.float32(ALPHA).tobytes() + x.tobytes())
        for a in kernels + biases + [dy]:
            f.write(np.ascontiguousarray(a, np.float32).tobytes())
    done = subprocess.run(cmd + [str(request), str(response)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    data = open(response, "rb").read()
    isa, floats = data[:16].rstrip(b"\0").decode(), np.frombuffer(data[16:], np.float32)
    shapes = [(n, out_dim), (n, in_dim)] + [k.shape for k in kernels] + [b.shape for b in biases]
    arrays, pos = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        arrays.append(floats[pos:pos + size].reshape(shape))
        pos += size
    assert pos == floats.size, "response size"
    return isa, arrays[0], arrays[1:]


def check(cmd, tmp_path, case, want_isa):
    in_dim, width, hidden, out_dim, act, out_act, n = case
    rng = np.random.default_rng(in_dim + width + n)
    x = rng.uniform(-1, 1, (n, in_dim)).astype(np.float32)
    kernels, biases = make_net(rng, in_dim, width, hidden, out_dim)
    dy = rng.standard_normal((n, out_dim)).astype(np.float32)
    isa, y, grads = run(cmd, tmp_path, x, kernels, biases, act, out_act, dy)
    assert isa == want_isa
    ry, rdx, rdk, rdb = reference(x, kernels, biases, act, out_act, dy)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ry).max(initial=0)))
    for got, want in zip(grads, [rdx] + rdk + rdb):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(want).max(initial=0)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_neon_path_matches_numpy_under_qemu(neon, tmp_path, case):
    check(neon, tmp_path, case, "neon")


def test_host_build_of_the_same_executable_matches_numpy(host, tmp_path):
    """The request/response format, on this machine's scalar path."""
    want = "scalar" if platform.machine() in ("x86_64", "AMD64") else "neon"
    check(host, tmp_path, CASES[0], want)


def test_neon_results_do_not_depend_on_the_shard_count(neon, tmp_path):
    rng = np.random.default_rng(7)
    kernels, biases = make_net(rng, 31, 64, 2, 3)
    x = rng.uniform(-1, 1, (700, 31)).astype(np.float32)
    dy = rng.standard_normal((700, 3)).astype(np.float32)
    runs = [run(neon, tmp_path, x, kernels, biases, "relu", "sigmoid", dy, threads) for threads in (1, 4)]
    assert runs[0][1].tobytes() == runs[1][1].tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(runs[0][2], runs[1][2]))
