"""MetalOpsFusedConv2D's GEMM paths on the CPU, each against the NumPy reference.

The kernel multiplies with oneDNN's sgemm, reached through the one entry TF's
pip build exports (MklMatMulOp<float>::MklBlasGemm in libtensorflow_cc.so.2):
in tiles of output pixels spread over the intra-op pool ("onednn_tiled"), or,
for filters too large for a single-threaded tile, in threaded chunks
("onednn_chunked"). Without that entry, or with METAL_OPS_CONV_GEMM=eigen, it
uses Eigen's contraction ("eigen"). The path each call took is read back from
the library (MetalOpsFusedConv2DLastGemmPath), so every case below checks both
the numbers and that the intended path computed them.
"""
import ctypes
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from metal_ops import _loader
from tests.test_fused_conv2d import reference
from tests.test_fused_conv2d_fusion import MKL_BLAS_GEMM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tensorflow_exports_sgemm():
    """Independent of the kernel: does the loaded libtensorflow_cc.so.2 export the entry?"""
    path = os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2")
    try:
        lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 4) | os.RTLD_LAZY)
    except OSError:
        return False
    return hasattr(lib, MKL_BLAS_GEMM)


def _last_path():
    metal_ops.zero_out([1])  # make sure the library is loaded
    lib = ctypes.CDLL(_loader.library_path(), mode=getattr(os, "RTLD_NOLOAD", 4) | os.RTLD_LAZY)
    fn = lib.MetalOpsFusedConv2DLastGemmPath
    fn.restype = ctypes.c_char_p
    return fn().decode()


ONEDNN = _tensorflow_exports_sgemm()
DEFAULT_PATH = "onednn_tiled" if ONEDNN else "eigen"
LARGE_FILTER_PATH = "onednn_chunked" if ONEDNN else "eigen"

# name, x shape, filter shape, strides, padding, dilations, path expected by default
CASES = [
    ("1x1_direct", (2, 9, 11, 24), (1, 1, 24, 40), (1, 1), "VALID", (1, 1), DEFAULT_PATH),
    ("3x3_same", (2, 12, 10, 8), (3, 3, 8, 16), (1, 1), "SAME", (1, 1), DEFAULT_PATH),
    ("1x1_strided", (1, 9, 9, 16), (1, 1, 16, 8), (2, 2), "SAME", (1, 1), DEFAULT_PATH),
    ("3x3_dilated_valid", (2, 11, 13, 4), (3, 3, 4, 5), (1, 1), "VALID", (2, 2), DEFAULT_PATH),
    ("5x3_explicit", (1, 8, 9, 3), (5, 3, 3, 7), (2, 1), [[2, 1], [0, 3]], (1, 1), DEFAULT_PATH),
    ("single_pixel", (1, 1, 1, 6), (1, 1, 6, 3), (1, 1), "VALID", (1, 1), DEFAULT_PATH),
    # Several tiles per worker: 2*40*40 pixels, tiles of at most a few hundred rows.
    ("3x3_many_tiles", (2, 40, 40, 16), (3, 3, 16, 32), (1, 1), "SAME", (1, 1), DEFAULT_PATH),
    # K*Cout*4 bytes (3x3x256x256: 2.4 MB) exceed half of any x86 L2 up to 4 MB:
    # no single-threaded tile fits, the threaded chunks run.
    ("3x3_large_filter", (1, 6, 7, 256), (3, 3, 256, 256), (1, 1), "SAME", (1, 1),
     LARGE_FILTER_PATH),
]


def _run(case, act, with_bias, with_residual, seed=0):
    name, xs, ws, strides, padding, dil, _ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    k = ws[0] * ws[1] * ws[2]
    w = (rng.standard_normal(ws) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(ws[3]).astype(np.float32) if with_bias else None
    z = reference(x, w, strides=strides, padding=padding, dilations=dil)
    r = rng.standard_normal(z.shape).astype(np.float32) if with_residual else None
    want = reference(x, w, b, r, strides, padding, dil, act)
    got = metal_ops.fused_conv2d(x, w, bias=b, residual=r, strides=strides, padding=padding,
                                 dilations=dil, activation=act).numpy()
    return got, want


@pytest.fixture
def eigen_gemm(monkeypatch):
    monkeypatch.setenv("METAL_OPS_CONV_GEMM", "eigen")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("act", ["relu", "swish", "none"])
def test_default_gemm_path_matches_reference(case, act):
    got, want = _run(case, act, with_bias=True, with_residual=True)
    assert _last_path() == case[-1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eigen_fallback_matches_reference(case, eigen_gemm):
    got, want = _run(case, "relu", with_bias=True, with_residual=True)
    assert _last_path() == "eigen"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("with_bias,with_residual", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("act", ["relu6", "elu", "leaky_relu", "sigmoid", "tanh"])
def test_output_stage_variants_on_both_paths(act, with_bias, with_residual, monkeypatch):
    case = CASES[1]  # 3x3 SAME: patch gathering and the tiled sgemm
    for gemm, path in (("auto", DEFAULT_PATH), ("eigen", "eigen")):
        monkeypatch.setenv("METAL_OPS_CONV_GEMM", gemm)
        got, want = _run(case, act, with_bias, with_residual, seed=3)
        assert _last_path() == path
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4, err_msg=gemm)


def test_paths_agree_inside_tf_function(monkeypatch):
    """Graph mode, 16x56x56x64 -> 256 1x1 (the ResNet block's shape): both GEMMs agree."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.standard_normal((4, 56, 56, 64)).astype(np.float32))
    w = tf.constant((rng.standard_normal((1, 1, 64, 256)) / 8).astype(np.float32))
    b = tf.constant(rng.standard_normal(256).astype(np.float32))
    r = tf.constant(rng.standard_normal((4, 56, 56, 256)).astype(np.float32))
    f = tf.function(lambda x, w, b, r: metal_ops.fused_conv2d(x, w, b, r, activation="relu"))
    fast = f(x, w, b, r).numpy()
    assert _last_path() == DEFAULT_PATH
    monkeypatch.setenv("METAL_OPS_CONV_GEMM", "eigen")
    slow = f(x, w, b, r).numpy()
    assert _last_path() == "eigen"
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5)
    want = np.maximum(np.einsum("nhwc,co->nhwo", x.numpy().astype(np.float64),
                                w.numpy()[0, 0].astype(np.float64)) + b.numpy() + r.numpy(), 0)
    np.testing.assert_allclose(fast, want, rtol=1e-4, atol=2e-4)


def test_tensorflow_exports_the_sgemm_entry_here():
    """TF 2.21's pip wheel for x86_64 Linux exports it; if not, the kernel's fallback is in use."""
    if not ONEDNN:
        pytest.skip("this TensorFlow build has no MklBlasGemm export: the Eigen fallback is tested")
    metal_ops.fused_conv2d(np.ones((1, 2, 2, 1), np.float32), np.ones((1, 1, 1, 1), np.float32))
    assert _last_path() == "onednn_tiled"


def test_onednn_sgemm_used_with_onednn_opts_off():
    """TF_ENABLE_ONEDNN_OPTS=0 (where the plugin rewrites) still reaches oneDNN's sgemm."""
    code = textwrap.dedent(f"""
        import ctypes, json, os, sys
        sys.path[:0] = [{os.path.join(ROOT, 'python')!r}, {ROOT!r}]
        import numpy as np
        import metal_ops
        from metal_ops import _loader
        from tests.test_fused_conv2d import reference
        from tensorflow.python.util import _pywrap_util_port
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 10, 10, 8)).astype(np.float32)
        w = (rng.standard_normal((3, 3, 8, 12)) / 8).astype(np.float32)
        b = rng.standard_normal(12).astype(np.float32)
        r = rng.standard_normal((2, 10, 10, 12)).astype(np.float32)
        y = metal_ops.fused_conv2d(x, w, b, r, activation="relu").numpy()
        lib = ctypes.CDLL(_loader.library_path(), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        lib.MetalOpsFusedConv2DLastGemmPath.restype = ctypes.c_char_p
        err = float(np.max(np.abs(y - reference(x, w, b, r, act="relu"))))
        print("RESULT " + json.dumps({{"onednn": bool(_pywrap_util_port.IsMklEnabled()),
                                      "path": lib.MetalOpsFusedConv2DLastGemmPath().decode(),
                                      "err": err}}))
    """)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("METAL_OPS_CONV_GEMM", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])
    assert out["onednn"] is False
    assert out["path"] == DEFAULT_PATH
    assert out["err"] < 2e-4


@pytest.mark.parametrize("cin,path", [(32, DEFAULT_PATH), (256, LARGE_FILTER_PATH)], ids=["tiles", "chunks"])
@pytest.mark.parametrize("pool", [1, 2])
def test_inside_tf_data_private_threadpool(cin, path, pool):
    """tf.data runs the op on its own pool (the device's worker pool for the
    function): the tiles' sgemm calls stay single-threaded, the chunks' threaded
    sgemm must not wait on tasks queued behind a blocked worker."""
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((6, 1, 10, 10, cin)).astype(np.float32)
    w = (rng.standard_normal((3, 3, cin, cin)) / np.sqrt(9 * cin)).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices(xs).map(
        lambda x: metal_ops.fused_conv2d(x, w, activation="relu"), num_parallel_calls=4)
    options = tf.data.Options()
    options.threading.private_threadpool_size = pool
    got = [y.numpy() for y in ds.with_options(options)]
    assert _last_path() == path
    for x, y in zip(xs, got):
        np.testing.assert_allclose(y, reference(x, w, act="relu"), rtol=1e-4, atol=2e-4)
