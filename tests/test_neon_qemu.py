"""The arm64 builds of the CPU kernels (what a Mac's CPU and every Linux arm64
machine run), each against an independent float64 NumPy reference
(tests/reference/). On an x86-64 machine: cross-compiled with Debian's
aarch64-linux-gnu-g++ as static executables and run under qemu-aarch64. On an
arm64 machine (an Apple-silicon Mac, Linux arm64): built with this machine's
compiler and run natively, without qemu and without -static (macOS cannot
link static executables).

- FusedMLP: the NEON path of kernels/cpu/simd.h, through the TF-free core
  (tests/fused_mlp_isa/fused_mlp_isa.cc) in tests/neon/fused_mlp_main.cc.
- VolumeRender (Eigen's NEON packets in phase B), RobustLoss (Eigen's NEON
  log / exp), HashEncode (its scatter without the x86 FMA intrinsics), and the
  kernels/common formulas of SHEncode, DistortionLoss, PackedVolumeRender and
  RayMarch compiled for arm64: tests/neon/cpu_ops_main.cc around the TF-free
  bodies of their CPU kernels (kernels/*/*_cpu.h).

- The MSL shim's fibers (tests/metal_shim/threadgroups.cc, the model of
  Metal's threadgroups), whose stack switch is assembly per architecture:
  tests/neon/threadgroups_main.cc.

Not here: ZeroOut (a copy) and FusedConv2D (its arithmetic is OpenBLAS's
GEMM). The same executables built for this machine (no -m flags: the scalar
or SSE paths) check the request/response formats and the references.

`make test` installs the tools first on x86-64 (tools/build/install_cross_tools.sh,
through tools/build/apt_install.sh, whose turn-taking is tested last); without them
these tests skip and say which is missing, or fail in CI (required()).
Emulated timings mean nothing: correctness only.
"""
import glob
import importlib.util
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

from tests.reference import distortion_loss as dl_ref
from tests.reference import hash_encode as he_ref
from tests.reference import packed_volume_render as pvr_ref
from tests.reference import ray_march as rm_ref
from tests.reference import robust_loss as rl_ref
from tests.reference import sh_encode as sh_ref
from tests.reference import trunc_exp as te_ref
from tests.reference import volume_render as vr_ref
from tests.reference.fused_mlp import ALPHA
from tests.reference.render_testing import cotangents, grad_tol, make_background
from tests.test_fused_mlp import make_net, reference
from tests.activation_codes import activation_code
from tests.test_fused_mlp_isa import CASES
from tests.test_hash_encode import SMALL, close, grid_args, make_points, make_table

pytestmark = pytest.mark.source_tree("kernels/ and the ARM64 cross tools")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = [os.path.join(ROOT, "tests", "neon", "fused_mlp_main.cc"),
           os.path.join(ROOT, "tests", "fused_mlp_isa", "fused_mlp_isa.cc")]
# The main and every op's driver, found by name (tests/neon/<op>_neon.cc: adding an op edits no list here).
CPU_OPS_SOURCES = [os.path.join(ROOT, "tests", "neon", "cpu_ops_main.cc")] + sorted(
    glob.glob(os.path.join(ROOT, "tests", "neon", "*_neon.cc")))


def one_unit(sources, folder):
    """A source file that includes `sources`: compiled as one translation unit,
    the drivers parse Eigen once, not once each (half the time)."""
    path = os.path.join(folder, "cpu_ops_all.cc")
    with open(path, "w") as f:
        f.writelines(f'#include "{os.path.relpath(s, ROOT)}"\n' for s in sources)
    return [path]
CROSS_CXX = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"
INSTALL = "tools/build/install_cross_tools.sh (apt-get install g++-aarch64-linux-gnu qemu-user)"


def required():
    """Whether missing cross tools fail these tests instead of skipping them: in
    CI (CI=true, as most CI services set it; .ci/run sets METAL_OPS_REQUIRE_NEON=1)."""
    return (os.environ.get("METAL_OPS_REQUIRE_NEON") == "1" or
            os.environ.get("CI", "").lower() in ("1", "true", "yes"))


def eigen_include():
    """TensorFlow's copy of Eigen (header-only), the one the op library builds with."""
    spec = importlib.util.find_spec("tensorflow")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if os.path.exists(os.path.join(folder, "include", "Eigen", "Core")):
            return os.path.join(folder, "include")
    pytest.skip("needs TensorFlow's headers (Eigen) in this Python")


HOST_CXX = "g++"  # on a Mac, Apple's clang under that name


def native_arm64(machine=None):
    """Whether this machine runs arm64 code itself (an Apple-silicon Mac reports
    arm64, Linux arm64 aarch64): the NEON executables then need neither the
    cross compiler nor qemu."""
    return (machine or platform.machine()) in ("arm64", "aarch64")


def build_command(cxx, out, sources=SOURCES, flags=(), cross=False):
    # -static only for the cross build: no aarch64 sysroot or loader is needed at
    # run time under qemu. A build for this machine links normally (macOS has
    # no static libc: -static fails to link there).
    return [cxx, "-std=c++17", "-O2", *(["-static"] if cross else []), "-Wall", "-Wno-sign-compare", "-Werror",
            "-I", ROOT, *flags, "-o", out, *sources]


def build(cxx, out, sources=SOURCES, flags=(), cross=False):
    done = subprocess.run(build_command(cxx, out, sources, flags, cross), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def neon_toolchain(machine=None):
    """(compiler, command prefix, cross) that build and run the arm64
    executables: this machine's compiler, run natively, on arm64; else the
    cross compiler, run under qemu (skips, or fails where required(), without them)."""
    if native_arm64(machine):
        if not os.path.exists(SOURCES[1]):
            pytest.skip("needs the source tree (tests/fused_mlp_isa, kernels/): run from a clone")
        if shutil.which(HOST_CXX) is None:
            pytest.skip(f"needs {HOST_CXX} (on a Mac: xcode-select --install)")
        return HOST_CXX, [], False
    cross_tools()
    return CROSS_CXX, [QEMU], True


def cross_tools():
    """Skips (fails where required()) without the cross compiler and qemu."""
    if not os.path.exists(SOURCES[1]):
        pytest.skip("needs the source tree (tests/fused_mlp_isa, kernels/): run from a clone")
    missing = [t for t in (CROSS_CXX, QEMU) if shutil.which(t) is None]
    if missing:
        why = f"{' and '.join(missing)} not installed: the NEON path cannot run here ({INSTALL})"
        if required():
            pytest.fail(f"{why}; METAL_OPS_REQUIRE_NEON=1 or CI=true: the NEON tests must run")
        pytest.skip(why)


def test_missing_cross_tools_fail_where_required(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("METAL_OPS_REQUIRE_NEON", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        cross_tools()
    for name, value in (("METAL_OPS_REQUIRE_NEON", "1"), ("CI", "true")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            with pytest.raises(pytest.fail.Exception, match="the NEON tests must run"):
                cross_tools()


def test_an_arm64_machine_runs_neon_natively_without_static(monkeypatch):
    # An Apple-silicon Mac: no qemu, no cross compiler, no -static (which
    # macOS cannot link); cross_tools() is never asked.
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name == HOST_CXX else None)
    for machine in ("arm64", "aarch64"):
        cxx, prefix, cross = neon_toolchain(machine)
        assert (cxx, prefix, cross) == (HOST_CXX, [], False)
        assert "-static" not in build_command(cxx, "out", cross=cross)
    assert "-static" in build_command(CROSS_CXX, "out", cross=True)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="qemu-aarch64"):
        neon_toolchain("x86_64")


@pytest.fixture(scope="module")
def neon(tmp_path_factory):
    cxx, prefix, cross = neon_toolchain()
    return prefix + [build(cxx, str(tmp_path_factory.mktemp("neon") / "fused_mlp_neon"), cross=cross)]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if not os.path.exists(SOURCES[1]) or shutil.which(HOST_CXX) is None:
        pytest.skip(f"needs the source tree and {HOST_CXX}")
    # No -m flags: on x86-64 that is the scalar fallback of simd.h.
    return [build(HOST_CXX, str(tmp_path_factory.mktemp("host") / "fused_mlp_host"))]


def run(cmd, tmp_path, x, kernels, biases, act, out_act, dy, threads=3):
    n, in_dim = x.shape
    width, out_dim, hidden = kernels[0].shape[1], kernels[-1].shape[1], len(kernels) - 1
    request, response = tmp_path / "request.bin", tmp_path / "response.bin"
    header = np.array([n, in_dim, width, hidden, out_dim, activation_code(act), activation_code(out_act), threads, 0],
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
def test_neon_path_matches_numpy(neon, tmp_path, case):
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


# ---- the other CPU kernels: tests/neon/cpu_ops_main.cc ------------------------------------------


@pytest.fixture(scope="module", params=["aarch64", "host"])
def cpu_ops(request, tmp_path_factory):
    """[command...] of cpu_ops_main built for arm64 (run under qemu, or natively
    on an arm64 machine) or for this machine."""
    include = eigen_include()
    if request.param == "host":
        if shutil.which(HOST_CXX) is None:
            pytest.skip(f"needs {HOST_CXX}")
        folder = tmp_path_factory.mktemp("host")
        return [build(HOST_CXX, str(folder / "cpu_ops_host"), one_unit(CPU_OPS_SOURCES, folder),
                      ["-isystem", include])]
    cxx, prefix, cross = neon_toolchain()
    folder = tmp_path_factory.mktemp("neon")
    exe = build(cxx, str(folder / "cpu_ops_neon"), one_unit(CPU_OPS_SOURCES, folder), ["-isystem", include],
                cross=cross)
    return prefix + [exe]


def call(cmd, tmp_path, op, ints, reals, arrays):
    """Outputs of `cpu_ops_main op` (the format: tests/neon/cpu_ops_main.cc); asserts
    the build's architecture (and NEON on arm64)."""
    request, response = tmp_path / f"{op}.request", tmp_path / f"{op}.response"
    with open(request, "wb") as f:
        for values, dtype in ((ints, np.int64), (reals, np.float64)):
            f.write(np.int64(len(values)).tobytes() + np.asarray(values, dtype).tobytes())
        f.write(np.int64(len(arrays)).tobytes())
        for a in arrays:
            a = np.ascontiguousarray(a)
            assert a.dtype in (np.uint8, np.float32, np.float64), a.dtype
            f.write(np.array([a.itemsize, a.size], np.int64).tobytes() + a.tobytes())
    done = subprocess.run(cmd + [op, str(request), str(response)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    data = open(response, "rb").read()
    isa = data[:32].rstrip(b"\0").decode()
    if cmd[0] == QEMU or native_arm64():
        assert isa.startswith("aarch64") and "NEON" in isa, isa
    else:  # (macOS names arm64 what the compiler calls __aarch64__)
        assert isa.startswith(platform.machine()), isa
    count, pos, out = int(np.frombuffer(data, np.int64, 1, 32)[0]), 40, []
    for _ in range(count):
        itemsize, size = np.frombuffer(data, np.int64, 2, pos)
        out.append(np.frombuffer(data, {4: np.float32, 8: np.float64}[int(itemsize)], int(size), pos + 16))
        pos += 16 + int(itemsize) * int(size)
    assert pos == len(data), "response size"
    return out


# (R, S, early_termination, background, with_weights): S not a multiple of the
# packet width (tails), an opaque surface (early termination fires), one sample.
VR_CASES = [(5, 17, 1e-2, "per_ray", True), (4, 8, 0.0, "shared", False), (3, 1, 1e-4, "shared", True),
            (0, 6, 1e-4, "shared", True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", VR_CASES, ids=lambda c: "-".join(map(str, c)))
def test_volume_render(cpu_ops, tmp_path, dtype, case):
    R, S, eps, bg_kind, with_weights = case
    sigma, rgb, t = vr_ref.make_rays(R, S, seed=R + S, dtype=dtype, surface=True)
    assert vr_ref.margin_ok(sigma, t, eps)
    bg = make_background(bg_kind, R, dtype)
    cot = cotangents(R, (R, S), dtype, with_weights)
    zeros = np.zeros((R, S), dtype)
    out = call(cpu_ops, tmp_path, "volume_render" if dtype == np.float32 else "volume_render_f64",
               [R, S, bg_kind == "per_ray", with_weights, 3], [eps],
               [sigma, rgb, t, bg, cot[0], cot[1], cot[2], cot[3] if with_weights else zeros])
    want = vr_ref.render(sigma, rgb, t, bg, eps)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)
    for got, w in zip(out[:4], want):
        np.testing.assert_allclose(got.reshape(w.shape), w, **tol)
    g_sigma, g_rgb, g_bg = vr_ref.numeric_grads(sigma, rgb, t, bg, eps, cot)
    np.testing.assert_allclose(out[4].reshape(R, S), g_sigma, **grad_tol(dtype))
    np.testing.assert_allclose(out[5].reshape(R, S, 3), g_rgb, **grad_tol(dtype))
    per_ray = out[6].reshape(R, 3)
    np.testing.assert_allclose(per_ray if bg_kind == "per_ray" else per_ray.sum(0), g_bg, **grad_tol(dtype))


def test_packed_volume_render(cpu_ops, tmp_path):
    counts = [7, 0, 1, 12, 5]
    eps = 1e-2
    sigma, rgb, t0, t1, offsets, counts = pvr_ref.make_packed(counts, seed=3, surface=True)
    assert pvr_ref.margin_ok(sigma, t0, t1, offsets, counts, eps)
    R, N = len(counts), len(sigma)
    bg = make_background("per_ray", R, np.float32)
    cot = cotangents(R, (N,), np.float32, True)
    out = call(cpu_ops, tmp_path, "packed_volume_render", [R, N, 1, 1], [eps],
               [sigma, rgb, t0, t1, offsets.astype(np.float32), counts.astype(np.float32), bg, *cot])
    want = pvr_ref.render(sigma, rgb, t0, t1, offsets, counts, bg, eps)
    for got, w in zip(out[:4], want):
        np.testing.assert_allclose(got.reshape(w.shape), w, rtol=2e-5, atol=2e-5)
    g_sigma, g_rgb, g_bg = pvr_ref.numeric_grads(sigma, rgb, t0, t1, offsets, counts, bg, eps, cot)
    for got, w in zip(out[4:], (g_sigma, g_rgb, g_bg)):
        np.testing.assert_allclose(got.reshape(w.shape), w, **grad_tol(np.float32))


# (alphas, scales) per channel: the block path's general form (small and large
# |x|, alpha near 2), a closed form (scalar alpha = 2, +inf), per-channel mixes.
RL_CASES = {"general": ([1.5], [0.7]), "negative": ([-2.5], [1.3]), "near2": ([1.999], [0.4]),
            "alpha2": ([2.0], [0.8]), "inf": ([np.inf], [2.0]), "channels": ([-1.0, 0.5, 1.7, 2.0], [0.3, 1.0, 2.5, 1.0])}


@pytest.mark.parametrize("name", list(RL_CASES))
def test_robust_loss(cpu_ops, tmp_path, name):
    alphas, scales = (np.asarray(v, np.float32) for v in RL_CASES[name])
    channels = len(alphas)
    rng = np.random.default_rng(channels)
    n = 1200 * channels + 3  # several blocks, a ragged last one
    x = (rng.standard_normal(n) * rng.choice([0.01, 1.0, 30.0], n)).astype(np.float32)
    if np.isinf(alphas).any():
        x = np.clip(x, -8, 8)  # rho = expm1(z / 2) stays finite
    g = rng.standard_normal(n).astype(np.float32)
    rho, dx, sum_a, sum_c = call(cpu_ops, tmp_path, "robust_loss", [n, channels, 3], [], [x, g, alphas, scales])
    col = np.arange(n) % channels
    a, c = alphas[col].astype(np.float64), scales[col].astype(np.float64)
    np.testing.assert_allclose(rho, rl_ref.rho_saturated(x, a, c), rtol=3e-5, atol=1e-30)
    for ch in range(channels):
        rdx, rda, rdc = rl_ref.grads(x[col == ch], float(alphas[ch]), float(scales[ch]))
        gc = g[col == ch].astype(np.float64)
        np.testing.assert_allclose(dx[col == ch], gc * rdx, rtol=3e-5, atol=1e-30)
        np.testing.assert_allclose(sum_a[ch], np.sum(gc * rda), rtol=2e-4, atol=1e-6 * np.sum(np.abs(gc * rda)))
        np.testing.assert_allclose(sum_c[ch], np.sum(gc * rdc), rtol=2e-4, atol=1e-6 * np.sum(np.abs(gc * rdc)))


def test_trunc_exp(cpu_ops, tmp_path):
    """Vector blocks and the scalar formula beside them: NaN, infinities and
    values beyond simd::Exp's range put their block on the scalar path."""
    rng = np.random.default_rng(5)
    n = 1000 + 3  # several blocks, a ragged last one
    x = rng.uniform(-20, 20, n).astype(np.float32)
    x[[7, 100, 333, 500, 640, 901]] = [np.nan, np.inf, -np.inf, 95.0, -95.0, 88.5]
    x[200:240] = rng.uniform(-87.3, 88.7, 40)  # the whole vector range
    dy = rng.standard_normal(n).astype(np.float32)
    dy[50] = np.nan
    y, dx = call(cpu_ops, tmp_path, "trunc_exp", [n, 3], [], [x, dy])
    te_ref.assert_like(y, te_ref.forward(x), np.float32)
    te_ref.assert_like(dx, te_ref.grad(dy, x), np.float32)


# (D, F, interpolation, out_of_range): every D and F once (cpu_ops_main builds these pairs).
HE_CASES = [(3, 2, "linear", "clamp"), (2, 4, "smoothstep", "wrap"), (4, 1, "linear", "zero"),
            (1, 8, "smoothstep", "clamp")]


@pytest.mark.parametrize("case", HE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_hash_encode(cpu_ops, tmp_path, case):
    d, f, interpolation, out_of_range = case
    cfg = SMALL if d > 1 else dict(num_levels=4, log2_hashmap_size=4, base_resolution=8, per_level_scale=2.0)
    n, L = 300, cfg["num_levels"]
    x = make_points(n, d, seed=d * 10 + f)
    table = make_table(d, f, cfg, seed=f)
    rng = np.random.default_rng(7)
    dy = rng.normal(size=(n, L * f)).astype(np.float32)
    gg = rng.normal(size=(n, d)).astype(np.float32)
    ints = [d, f, L, cfg["log2_hashmap_size"], cfg["base_resolution"], he_ref.INTERPOLATIONS[interpolation],
            he_ref.OUT_OF_RANGE[out_of_range], 3]
    y, gt, gx, gt2, gdy = call(cpu_ops, tmp_path, "hash_encode", ints, [cfg["per_level_scale"]], [x, table, dy, gg])
    kw = dict(interpolation=interpolation, out_of_range=out_of_range, **grid_args(cfg))
    close(y.reshape(n, L * f), he_ref.encode(x, table, **kw), 1e-5)
    want_gt, want_gx = he_ref.encode_grads(x, table, dy, **kw)
    close(gt.reshape(table.shape), want_gt, 1e-5)
    close(gx.reshape(n, d), want_gx, 1e-5)
    want_gt2, want_gdy = he_ref.encode_second_order(x, table, dy, gg, **kw)
    close(gt2.reshape(table.shape), want_gt2, 1e-5)
    close(gdy.reshape(n, L * f), want_gdy, 1e-5)


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_sh_encode(cpu_ops, tmp_path, degree):
    rng = np.random.default_rng(degree)
    n = 257
    dirs = rng.normal(size=(n, 3)).astype(np.float32)
    grad = rng.normal(size=(n, degree * degree)).astype(np.float32)
    values, grad_dirs = call(cpu_ops, tmp_path, "sh_encode", [n, degree], [], [dirs, grad])
    scale = np.max(np.abs(dirs), axis=-1, keepdims=True) ** 3 + 1
    np.testing.assert_allclose(values.reshape(n, -1) / scale, sh_ref.values(dirs, degree) / scale, rtol=0, atol=1e-6)
    scale = np.abs(grad).sum(-1, keepdims=True) * (np.abs(dirs).max(-1, keepdims=True) ** 2 + 1)
    np.testing.assert_allclose(grad_dirs.reshape(n, 3) / scale, sh_ref.vjp(dirs, grad, degree) / scale, rtol=0,
                               atol=2e-6)


def test_distortion_loss(cpu_ops, tmp_path):
    rng = np.random.default_rng(5)
    R, S = 6, 19
    w = rng.uniform(0, 1, (R, S)).astype(np.float32)
    t = np.sort(rng.uniform(0, 1, (R, S + 1)), axis=1).astype(np.float32)
    t[:, 3] = t[:, 2]  # a zero-width interval
    g = rng.normal(size=R).astype(np.float32)
    loss, gw, gt = call(cpu_ops, tmp_path, "distortion_loss", [R, S], [], [w, t, g])
    want_loss, want_dw, want_dt = dl_ref.reference(w, t)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw.reshape(R, S), g[:, None] * want_dw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gt.reshape(R, S + 1), g[:, None] * want_dt, rtol=1e-4, atol=1e-5)


# (G, cascades, fill, cone_angle, max_samples, jitter): cascades, cone stepping, the sample cap, jitter.
RM_CASES = [(8, 2, 0.3, 0.0, 1024, False), (16, 1, 0.2, 0.02, 1024, False), (5, 3, 0.6, 0.0, 7, False),
            (8, 1, 0.4, 0.0, 1024, True)]


@pytest.mark.parametrize("case", RM_CASES, ids=lambda c: "-".join(map(str, c)))
def test_ray_march(cpu_ops, tmp_path, case):
    g, cascades, fill, cone_angle, max_samples, jitter = case
    origins, dirs, near, far, bits = rm_ref.random_case(g * 100 + cascades, 61, g, cascades, fill)
    kw = dict(aabb=[-0.5, 0.0, -0.25, 1.5, 1.0, 1.75], grid_resolution=g, step_size=0.0123, cone_angle=cone_angle,
              max_step_size=0.2, max_samples=max_samples, jitter=jitter, seed=11)
    got = call(cpu_ops, tmp_path, "ray_march", [len(near), g, cascades, max_samples, jitter, 11],
               [*kw["aabb"], 0.0123, cone_angle, 0.2], [origins, dirs, near, far, np.asarray(bits, np.uint8)])
    want = rm_ref.reference(origins, dirs, near, far, bits, **kw)
    for i in (2, 3, 4):  # ray indices, offsets, counts
        np.testing.assert_array_equal(got[i], want[i])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


# ---- tools/build/apt_install.sh: installers that `make -j` starts together take turns -----------------


@pytest.mark.skipif(not os.path.isdir("/var/lib/apt/lists") or shutil.which("flock") is None,
                    reason="needs apt's lists folder and flock(1)")
def test_concurrent_installs_take_turns(tmp_path):
    """Two apt_install.sh at once (as msl-clang and cross-tools under make -j): the
    second waits instead of failing on apt's lock. apt-get is a stand-in that
    logs when each call begins and ends."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "begin $*" >> {log}\nsleep 0.3\necho "end $*" >> {log}\n'
                    '[ "$FAIL" = "$1" ] && exit 100\nexit 0\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    script = os.path.join(ROOT, "tools", "build", "apt_install.sh")
    runs = [subprocess.Popen(["bash", script, pkg], env=env) for pkg in ("pkg-a", "pkg-b")]
    assert [p.wait(timeout=60) for p in runs] == [0, 0]
    lines = log.read_text().splitlines()
    assert len(lines) == 8, lines
    # update, install: each call ends before the next begins, one installer's pair after the other's.
    for begin, end in zip(lines[0::2], lines[1::2]):
        assert begin.startswith("begin") and end == "end" + begin[len("begin"):], lines
    assert {lines[2].split()[-1], lines[6].split()[-1]} == {"pkg-a", "pkg-b"}, lines
    # apt-get's failure is the script's.
    done = subprocess.run(["bash", script, "pkg-c"], env=dict(env, FAIL="install"), capture_output=True)
    assert done.returncode == 100


# ---- tools/build/install_cross_tools.sh: what `make test` says before these tests run ------------------

@pytest.mark.parametrize("system,machine", [("Darwin", "arm64"), ("Linux", "aarch64")])
def test_make_test_says_neon_runs_natively_on_arm64(tmp_path, system, machine):
    """On an arm64 machine, not "will NOT run: not root, or no apt-get": nothing
    is installed and the banner says the NEON tests run natively. uname and id
    are stand-ins (an arm64 Mac's user is not root)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uname").write_text(f'#!/bin/sh\n[ "$1" = "-m" ] && echo {machine} || echo {system}\n')
    (bin_dir / "id").write_text("#!/bin/sh\necho 501\n")
    for name in ("uname", "id"):
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    done = subprocess.run(["bash", os.path.join(ROOT, "tools", "build", "install_cross_tools.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "will NOT run" not in done.stdout, done.stdout
    assert f"{system} {machine}" in done.stdout and "run natively" in done.stdout, done.stdout


# ---- the MSL shim's fibers: tests/neon/threadgroups_main.cc ------------------------------------

THREADGROUPS_SOURCES = [os.path.join(ROOT, "tests", "neon", "threadgroups_main.cc"),
                        os.path.join(ROOT, "tests", "metal_shim", "threadgroups.cc"),
                        os.path.join(ROOT, "tests", "metal_shim", "simdgroup_matrix_shim.cc")]
# The cross build of the shim: Debian's aarch64 GCC 12 has no _Float16 in C++ (the shim's half);
# clang has, and links with that GCC's arm64 libraries.
CROSS_CLANG = "clang++"


@pytest.mark.parametrize("machine", ["arm64", "host"])
def test_the_shims_fibers_switch_stacks_on_each_architecture(machine, tmp_path):
    """The model of Metal's threadgroups switches fibers in assembly of each
    architecture (tests/metal_shim/threadgroups.cc): a Mac runs the arm64 switch,
    this machine its own. Sums with barriers in both thread orders, values carried
    in callee-saved registers across every barrier, a simdgroup multiply, the
    errors for broken kernels and a nested dispatch, all checked by the program."""
    if machine == "host" or native_arm64():
        if shutil.which(HOST_CXX) is None:
            pytest.skip(f"needs {HOST_CXX}")
        cxx, prefix, flags, cross = HOST_CXX, [], [], False
    else:
        cross_tools()
        if shutil.which(CROSS_CLANG) is None:
            why = f"{CROSS_CLANG} not installed (make msl-clang installs it)"
            if required():
                pytest.fail(why)
            pytest.skip(why)
        cxx, prefix, flags, cross = CROSS_CLANG, [QEMU], ["--target=aarch64-linux-gnu"], True
    exe = build(cxx, str(tmp_path / "threadgroups"), THREADGROUPS_SOURCES, flags, cross)
    done = subprocess.run(prefix + [exe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.count("ok ") == 10, done.stdout + done.stderr
