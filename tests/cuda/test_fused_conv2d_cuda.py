"""FusedConv2D / FusedActivationGrad CUDA kernels vs the float64 NumPy
reference (tests/reference/fused_conv2d.py) through the harness (GPU machines
only; skips elsewhere).

The convolution's GEMM is cuBLAS's, opened at run time by its soname
(libcublas.so.<major version of the headers it was compiled with>, CUBLAS_HOME
in the Makefile): on a machine with CUDA 13's cuBLAS only, build the harness
against those headers, e.g. `make cuda-harness CUBLAS_HOME=/usr/local/cuda`
(or the folder of pip's nvidia cuBLAS package holding include/).

Tolerances: strict float32 GEMMs (allow_tf32=0) at 1e-4 of the O(1) outputs
(sums in another order); TF32 at 1e-2 (operands rounded to 10 bits), checked
in a child process (tests/conftest.py sets NVIDIA_TF32_OVERRIDE=0, which turns
TF32 off in cuBLAS).
Chunking is exercised through the plan's budgets: a few rows of output or
patches per chunk instead of megabytes.
"""
import ctypes
import glob
import json
import os
import site
import subprocess
import sys

import numpy as np
import pytest

from tests.cuda.harness import dptr, require_gpu, stream_ptr
from tests.reference.fused_conv2d import ref_act, ref_act_grad, reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACTS = ["none", "relu", "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "swish"]
I64x4 = ctypes.c_int64 * 4
I64x8 = ctypes.c_int64 * 8


_cublas = {}


def _load_cublas(lib):
    """Loads the cuBLAS the kernels open (the harness's soname) so that their
    dlopen finds it by name: from the library path, else from an installed
    nvidia-* pip package (TensorFlow's nvidia-cublas-cu12, PyTorch's CUDA 13
    cuBLAS)."""
    lib.metal_ops_cublas_soname.restype = ctypes.c_char_p
    soname = lib.metal_ops_cublas_soname().decode()
    if soname in _cublas:
        return _cublas[soname]
    candidates = [soname]
    for root in dict.fromkeys(site.getsitepackages() + sys.path):
        candidates += sorted(glob.glob(os.path.join(root, "nvidia", "**", soname), recursive=True))
    for path in candidates:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            _cublas[soname] = path
            return path
        except OSError:
            continue
    pytest.fail(f"{soname} (the cuBLAS of the headers the harness was built with) is neither on the library path "
                f"nor in a pip nvidia package here: build the harness against this machine's cuBLAS "
                f"(`make cuda-harness CUBLAS_HOME=<folder with include/cublas_v2.h>`) or put {soname}'s folder "
                f"on LD_LIBRARY_PATH")


def _lib():
    cupy, lib = require_gpu()
    _load_cublas(lib)
    p, i64, f32, s = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_char_p
    a = ctypes.POINTER(ctypes.c_int64)  # ctypes arrays, kept alive by the call
    lib.metal_ops_fused_conv2d_last_error.restype = ctypes.c_char_p
    lib.metal_ops_fused_conv2d_plan.argtypes = [a, a, a, a, s, a, i64, i64, a, a, a]
    lib.metal_ops_fused_conv2d_forward_float32.argtypes = [p, p, p, p, p, p, i64, i64, a, a, a, a, s, a, s, f32,
                                                           ctypes.c_int, p]
    lib.metal_ops_fused_activation_grad_float32.argtypes = [p, p, p, p, i64, s, f32, p]
    return cupy, lib


def _err(lib):
    return lib.metal_ops_fused_conv2d_last_error().decode()


def _ptr(a):
    return None if a is None else dptr(a).value


def _attrs(strides, padding, dilations):
    """(strides, dilations as [1, h, w, 1], padding name, explicit paddings or None)."""
    st = I64x4(1, strides[0], strides[1], 1)
    dl = I64x4(1, dilations[0], dilations[1], 1)
    if isinstance(padding, str):
        return st, dl, padding.encode(), None
    (t, b), (l, r) = padding
    return st, dl, b"EXPLICIT", I64x8(0, 0, t, b, l, r, 0, 0)


def plan(lib, xs, ws, strides=(1, 1), padding="SAME", dilations=(1, 1), max_patch_bytes=0, max_out_bytes=0):
    """(output shape, chunk_rows, patch_floats) of the kernel's plan."""
    st, dl, pad, ex = _attrs(strides, padding, dilations)
    out, rows, floats = I64x4(), (ctypes.c_int64 * 1)(), (ctypes.c_int64 * 1)()
    rc = lib.metal_ops_fused_conv2d_plan(I64x4(*xs), I64x4(*ws), st, dl, pad, ex, max_patch_bytes, max_out_bytes,
                                         out, rows, floats)
    assert rc == 0, _err(lib)
    return tuple(out), rows[0], floats[0]


def forward(cupy, lib, x, w, b=None, r=None, strides=(1, 1), padding="SAME", dilations=(1, 1), act="none",
            alpha=0.2, tf32=False, max_patch_bytes=0, max_out_bytes=0, offset=0):
    """The kernel's output (NumPy) and its plan. offset: the output and residual
    start that many floats into their buffers (unaligned vector accesses)."""
    out_shape, rows, floats = plan(lib, x.shape, w.shape, strides, padding, dilations, max_patch_bytes,
                                   max_out_bytes)
    n_out = int(np.prod(out_shape))
    d_x, d_w = cupy.asarray(x), cupy.asarray(w)
    d_b = None if b is None else cupy.asarray(b)
    d_r = None
    if r is not None:
        d_r = cupy.full(n_out + offset, np.nan, cupy.float32)[offset:]
        d_r[...] = cupy.asarray(r).ravel()
    d_out = cupy.full(n_out + offset, np.nan, cupy.float32)[offset:]
    d_patches = cupy.full(max(floats, 1), np.nan, cupy.float32)
    st, dl, pad, ex = _attrs(strides, padding, dilations)
    rc = lib.metal_ops_fused_conv2d_forward_float32(
        _ptr(d_x), _ptr(d_w), _ptr(d_b), _ptr(d_r), _ptr(d_out), _ptr(d_patches), floats, rows, I64x4(*x.shape),
        I64x4(*w.shape), st, dl, pad, ex, act.encode(), alpha, int(tf32), stream_ptr(cupy).value)
    assert rc == 0, _err(lib)
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_out).reshape(out_shape), (out_shape, rows, floats)


def data(xs, ws, seed=0, residual=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    fan_in = max(1, int(np.prod(ws[:3])))
    w = (rng.standard_normal(ws) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(ws[3]).astype(np.float32)
    return x, w, b, rng


def check_forward(cupy, lib, xs, ws, strides=(1, 1), padding="SAME", dilations=(1, 1), act="relu", bias=True,
                  residual=True, alpha=0.2, tf32=False, seed=0, **kw):
    x, w, b, rng = data(xs, ws, seed)
    out_shape = plan(lib, xs, ws, strides, padding, dilations)[0]
    r = rng.standard_normal(out_shape).astype(np.float32) if residual else None
    got, p = forward(cupy, lib, x, w, b if bias else None, r, strides, padding, dilations, act, alpha, tf32, **kw)
    want = reference(x, w, b if bias else None, r, strides, padding, dilations, act, alpha)
    assert got.shape == want.shape
    tol = 1e-2 if tf32 else 1e-4
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    return p


GEOMS = [
    # x shape, w shape, strides, padding, dilations
    ((2, 8, 8, 5), (1, 1, 5, 7), (1, 1), "SAME", (1, 1)),          # 1x1: the input is the patch matrix
    ((2, 9, 7, 64), (1, 1, 64, 32), (1, 1), "VALID", (1, 1)),      # 1x1, 4-wide accesses
    ((1, 8, 9, 2), (1, 1, 2, 3), (2, 2), "VALID", (1, 1)),         # 1x1 strided: gathered
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), "SAME", (1, 1)),          # 3x3, odd channels
    ((2, 7, 6, 6), (3, 3, 6, 10), (1, 1), "SAME", (1, 1)),         # 2-wide accesses
    ((2, 10, 9, 16), (3, 3, 16, 24), (2, 2), "SAME", (1, 1)),      # stride 2, 4-wide
    ((1, 12, 11, 8), (5, 5, 8, 12), (1, 1), "VALID", (1, 1)),      # 5x5
    ((1, 13, 12, 4), (5, 5, 4, 5), (2, 1), "SAME", (1, 1)),        # 5x5, strides (2, 1)
    ((1, 10, 10, 3), (3, 3, 3, 2), (1, 1), "SAME", (2, 2)),        # dilation 2
    ((1, 11, 12, 4), (3, 3, 4, 4), (2, 2), "VALID", (2, 3)),       # strided and dilated
    ((1, 9, 8, 5), (3, 2, 5, 6), (2, 1), "VALID", (1, 1)),         # non-square filter
    ((1, 6, 7, 2), (3, 3, 2, 3), (1, 2), [[1, 2], [0, 1]], (1, 1)),  # explicit
    ((2, 5, 5, 4), (1, 1, 4, 4), (1, 1), [[1, 0], [2, 1]], (1, 1)),  # 1x1 with explicit padding: gathered
    ((3, 4, 4, 1), (2, 2, 1, 1), (1, 1), "SAME", (1, 1)),          # single channels
]


@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: f"{g[0]}-{g[1]}-s{g[2]}-{g[3]}-d{g[4]}")
@pytest.mark.parametrize("bias,residual", [(True, True), (True, False), (False, True), (False, False)])
def test_geometries_match_reference(geom, bias, residual):
    cupy, lib = _lib()
    xs, ws, strides, padding, dil = geom
    check_forward(cupy, lib, xs, ws, strides, padding, dil, act="relu", bias=bias, residual=residual)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[5], GEOMS[11]], ids=["1x1", "3x3s2", "explicit"])
def test_activations_match_reference(act, geom):
    cupy, lib = _lib()
    xs, ws, strides, padding, dil = geom
    check_forward(cupy, lib, xs, ws, strides, padding, dil, act=act, seed=3)


@pytest.mark.parametrize("alpha", [0.0, 0.01, 0.3, -0.5, 1.5])
def test_leaky_relu_alpha(alpha):
    cupy, lib = _lib()
    check_forward(cupy, lib, (2, 7, 6, 3), (3, 3, 3, 4), act="leaky_relu", alpha=alpha, seed=5)


@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[1], GEOMS[3], GEOMS[5], GEOMS[8], GEOMS[11], GEOMS[12]],
                         ids=["1x1", "1x1-64", "3x3", "3x3s2", "dilated", "explicit", "1x1-padded"])
@pytest.mark.parametrize("budget", ["one-row", "three-output-rows", "two-patch-rows"])
def test_chunked_matches_reference(geom, budget):
    """Small budgets: many chunks (down to one output pixel each), each with its
    own gather, GEMM and output stage over its slice of the residual."""
    cupy, lib = _lib()
    xs, ws, strides, padding, dil = geom
    k = ws[0] * ws[1] * ws[2]
    max_patch_bytes, max_out_bytes = {"one-row": (1, 1), "three-output-rows": (0, 3 * 4 * ws[3]),
                                      "two-patch-rows": (2 * 4 * k, 0)}[budget]
    out_shape, rows, _ = plan(lib, xs, ws, strides, padding, dil, max_patch_bytes, max_out_bytes)
    pixels = out_shape[0] * out_shape[1] * out_shape[2]
    gathers = not (ws[0] == ws[1] == 1 and strides == (1, 1) and padding in ("SAME", "VALID"))
    want_rows = {"one-row": 1, "three-output-rows": 3, "two-patch-rows": 2 if gathers else pixels}[budget]
    assert rows == want_rows < pixels or (rows == pixels and not gathers)
    p = check_forward(cupy, lib, xs, ws, strides, padding, dil, act="swish", seed=7,
                      max_patch_bytes=max_patch_bytes, max_out_bytes=max_out_bytes)
    assert p[1] == rows


def test_plan_bounds_the_patch_buffer():
    cupy, lib = _lib()
    # 3x3x64 patches of a batch-32 56x56 image: 231 MB unchunked.
    xs, ws = (32, 56, 56, 64), (3, 3, 64, 64)
    out, rows, floats = plan(lib, xs, ws)
    assert out == (32, 56, 56, 64)
    assert 0 < floats * 4 <= 32 << 20 and floats == rows * 3 * 3 * 64
    assert plan(lib, xs, (1, 1, 64, 64))[2] == 0  # pointwise: no patch buffer
    assert plan(lib, (1, 4, 4, 2), (1, 1, 2, 3), max_out_bytes=1 << 30)[1] == 16  # at most every pixel


def test_unaligned_output_and_residual():
    """Output and residual one float past an aligned address: scalar accesses."""
    cupy, lib = _lib()
    for geom in (GEOMS[1], GEOMS[5]):
        xs, ws, strides, padding, dil = geom
        check_forward(cupy, lib, xs, ws, strides, padding, dil, act="tanh", offset=1, seed=9)


# tests/conftest.py turns TF32 off process-wide (NVIDIA_TF32_OVERRIDE=0, read by
# cuBLAS): the TF32 path runs in a child without it.
TF32_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from tests.cuda import test_fused_conv2d_cuda as t
cupy, lib = t._lib()
x, w, b, _ = t.data((8, 16, 16, 64), (3, 3, 64, 64), seed=11)
want = t.reference(x, w, b, act="none")
print(json.dumps({mode: float(np.abs(t.forward(cupy, lib, x, w, b, tf32=mode == "tf32")[0] - want).max())
                  for mode in ("strict", "tf32")}))
"""


def test_tf32_path_matches_reference_loosely_and_strict_path_closely():
    _lib()
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_TF32_OVERRIDE"}
    out = subprocess.run([sys.executable, "-c", TF32_CHILD, ROOT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    err = json.loads(out.stdout.strip().splitlines()[-1])
    assert err["strict"] < 1e-4 and err["tf32"] < 1e-2, err
    # TF32 tensor cores really ran: operands rounded to 10 bits leave errors
    # far above float32's on 576-term sums.
    assert err["tf32"] > 10 * err["strict"], err


@pytest.mark.parametrize("act", ["relu", "elu", "sigmoid"])
def test_empty_contraction_applies_output_stage(act):
    """No input channels, or an empty image padded into a non-empty output:
    the convolution is 0, the output is act(bias + residual)."""
    cupy, lib = _lib()
    for xs, ws, padding in [((2, 3, 4, 0), (3, 3, 0, 5), "SAME"), ((1, 0, 0, 2), (1, 1, 2, 3), [[1, 1], [2, 0]])]:
        x, w, b, rng = data(xs, ws, seed=13)
        out_shape = plan(lib, xs, ws, padding=padding)[0]
        assert np.prod(out_shape) > 0
        r = rng.standard_normal(out_shape).astype(np.float32)
        got, _ = forward(cupy, lib, x, w, b, r, padding=padding, act=act)
        np.testing.assert_allclose(got, ref_act(np.float64(b) + r, act), atol=1e-6, rtol=1e-6)
        got, _ = forward(cupy, lib, x, w, None, None, padding=padding, act=act)
        np.testing.assert_allclose(got, ref_act(np.zeros(out_shape), act), atol=1e-6)


@pytest.mark.parametrize("xs,ws,padding", [
    ((0, 5, 5, 3), (3, 3, 3, 4), "SAME"),      # empty batch
    ((2, 5, 5, 3), (3, 3, 3, 0), "SAME"),      # no output channels
    ((1, 2, 2, 3), (3, 3, 3, 4), "VALID"),     # filter larger than the input
])
def test_empty_outputs(xs, ws, padding):
    cupy, lib = _lib()
    x, w, b, _ = data(xs, ws)
    got, (out_shape, _, _) = forward(cupy, lib, x, w, b, padding=padding, act="relu")
    assert got.size == 0 and np.prod(out_shape) == 0


def test_bad_arguments_report_errors():
    cupy, lib = _lib()
    x, w, b, _ = data((1, 5, 5, 3), (3, 3, 3, 4))
    with pytest.raises(AssertionError, match="'padding' must be 'SAME', 'VALID' or 'EXPLICIT'"):
        forward(cupy, lib, x, w, padding="FULL")
    with pytest.raises(AssertionError, match="filter in_channels"):
        forward(cupy, lib, x, w[:, :, :2])
    # A patch buffer smaller than the chunk: refused before any launch.
    d = [cupy.asarray(a) for a in (x, w)]
    out = cupy.zeros((1, 5, 5, 4), cupy.float32)
    st, dl, pad, _ = _attrs((1, 1), "SAME", (1, 1))
    patches = cupy.zeros(10, cupy.float32)
    rc = lib.metal_ops_fused_conv2d_forward_float32(
        _ptr(d[0]), _ptr(d[1]), None, None, _ptr(out), _ptr(patches), 10, 5, I64x4(1, 5, 5, 3), I64x4(3, 3, 3, 4),
        st, dl, pad, None, b"relu", 0.2, 0, stream_ptr(cupy).value)
    assert rc == 2 and "patch buffer" in _err(lib)


# ---- MetalOpsFusedActivationGrad -------------------------------------------------


def activation_grad(cupy, lib, g, y, z, act, alpha=0.2, in_place=False):
    d_g, d_y = cupy.asarray(g), cupy.asarray(y)
    d_z = None if z is None else cupy.asarray(z)
    d_dz = d_g if in_place else cupy.full_like(d_g, np.nan)
    rc = lib.metal_ops_fused_activation_grad_float32(_ptr(d_g), _ptr(d_y), _ptr(d_z), _ptr(d_dz), g.size,
                                                     act.encode(), alpha, stream_ptr(cupy).value)
    assert rc == 0, _err(lib)
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_dz)


def grad_data(n, seed=0):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal(n) * 3).astype(np.float32)
    z[: min(n, 4)] = [0.0, 6.0, -1e-3, 1e-3][: min(n, 4)]  # the kinks and next to them
    g = rng.standard_normal(n).astype(np.float32)
    return g, z


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("n", [1, 5, 4096, 100_003])
def test_activation_grad_matches_reference(act, n):
    cupy, lib = _lib()
    g, z = grad_data(n, seed=n)
    alpha = 0.2
    y = ref_act(np.float64(z), act, alpha).astype(np.float32)
    want = g * ref_act_grad(z, act, alpha)
    got = activation_grad(cupy, lib, g, y, z, act, alpha)  # from the pre-activation
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)
    if act != "swish":  # from the output: exact for every activation but swish
        got = activation_grad(cupy, lib, g, y, None, act, alpha)
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


def test_activation_grad_in_place_and_negative_leaky_alpha():
    cupy, lib = _lib()
    g, z = grad_data(1001, seed=3)
    y = ref_act(np.float64(z), "leaky_relu", -0.5).astype(np.float32)
    got = activation_grad(cupy, lib, g, y, z, "leaky_relu", -0.5, in_place=True)
    np.testing.assert_allclose(got, g * ref_act_grad(z, "leaky_relu", -0.5), atol=1e-6, rtol=1e-6)


def test_activation_grad_needs_features_where_the_output_cannot_tell():
    cupy, lib = _lib()
    g, z = grad_data(8)
    for act, alpha in [("swish", 0.2), ("leaky_relu", -0.5)]:
        with pytest.raises(AssertionError, match="features"):
            activation_grad(cupy, lib, g, z, None, act, alpha)


def test_activation_grad_empty():
    cupy, lib = _lib()
    e = np.zeros(0, np.float32)
    assert activation_grad(cupy, lib, e, e, None, "relu").size == 0
