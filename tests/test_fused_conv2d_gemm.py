"""MetalOpsFusedConv2D's GEMM on the CPU against the NumPy reference.

The kernel multiplies with OpenBLAS's sgemm (the pinned scipy-openblas32
package, linked by the op library), one single-threaded call per tile of output
pixels, the tiles spread over TensorFlow's intra-op pool. Tile heights come
from kernels/fused_conv2d/fused_conv2d.h: L2-sized for small filters, a fixed
height for filters too large for L2 (3x3 256 -> 256). The cases cover both,
many tiles per worker, one pixel, padding, strides and dilations, and every
output-stage variant.
"""
import ctypes
import os

import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference.fused_conv2d import reference

# name, x shape, filter shape, strides, padding, dilations
CASES = [
    ("1x1_direct", (2, 9, 11, 24), (1, 1, 24, 40), (1, 1), "VALID", (1, 1)),
    ("3x3_same", (2, 12, 10, 8), (3, 3, 8, 16), (1, 1), "SAME", (1, 1)),
    ("1x1_strided", (1, 9, 9, 16), (1, 1, 16, 8), (2, 2), "SAME", (1, 1)),
    ("3x3_dilated_valid", (2, 11, 13, 4), (3, 3, 4, 5), (1, 1), "VALID", (2, 2)),
    ("5x3_explicit", (1, 8, 9, 3), (5, 3, 3, 7), (2, 1), [[2, 1], [0, 3]], (1, 1)),
    ("single_pixel", (1, 1, 1, 6), (1, 1, 6, 3), (1, 1), "VALID", (1, 1)),
    # Several tiles per worker: 2*40*40 pixels, tiles of at most a few hundred rows.
    ("3x3_many_tiles", (2, 40, 40, 16), (3, 3, 16, 32), (1, 1), "SAME", (1, 1)),
    # K*Cout*4 bytes (3x3x256x256: 2.4 MB) exceed half of any x86 L2 up to 4 MB:
    # the fixed tile height for large filters, several tiles.
    ("3x3_large_filter", (2, 12, 13, 256), (3, 3, 256, 256), (1, 1), "SAME", (1, 1)),
]


def _run(case, act, with_bias, with_residual, seed=0):
    name, xs, ws, strides, padding, dil = case
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


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("act", ["relu", "swish", "none"])
def test_gemm_matches_reference(case, act):
    got, want = _run(case, act, with_bias=True, with_residual=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("with_bias,with_residual", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("act", ["relu6", "elu", "leaky_relu", "sigmoid", "tanh"])
@pytest.mark.parametrize("case", [CASES[1], CASES[-1]], ids=["l2_tiles", "large_filter_tiles"])
def test_output_stage_variants(case, act, with_bias, with_residual):
    got, want = _run(case, act, with_bias, with_residual, seed=3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


def test_resnet_block_shape_inside_tf_function():
    """Graph mode, 4x56x56x64 -> 256 1x1 (the ResNet block's shape) against float64."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.standard_normal((4, 56, 56, 64)).astype(np.float32))
    w = tf.constant((rng.standard_normal((1, 1, 64, 256)) / 8).astype(np.float32))
    b = tf.constant(rng.standard_normal(256).astype(np.float32))
    r = tf.constant(rng.standard_normal((4, 56, 56, 256)).astype(np.float32))
    f = tf.function(lambda x, w, b, r: metal_ops.fused_conv2d(x, w, b, r, activation="relu"))
    got = f(x, w, b, r).numpy()
    want = np.maximum(np.einsum("nhwc,co->nhwo", x.numpy().astype(np.float64),
                                w.numpy()[0, 0].astype(np.float64)) + b.numpy() + r.numpy(), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


def _openblas_in_process():
    """The OpenBLAS the op library loaded (through its rpath), found in this
    process's mappings, independently of the kernel (numpy's own OpenBLAS,
    libscipy_openblas64_*.so, is another library)."""
    metal_ops.zero_out([1])  # the op library is loaded
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if line.rstrip().endswith("/libscipy_openblas.so")}
    return sorted(paths)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_links_the_pinned_scipy_openblas32():
    import scipy_openblas32

    paths = _openblas_in_process()
    assert len(paths) == 1, paths
    assert os.path.realpath(paths[0]) == os.path.realpath(
        os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True)))


@pytest.mark.cpu_semantics("the CPU kernel's GEMM is OpenBLAS")
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_openblas_runs_single_threaded():
    """The parallelism is TensorFlow's pool: after a convolution OpenBLAS is set
    to one thread, so it never starts work on its own pool."""
    metal_ops.fused_conv2d(np.ones((1, 4, 4, 2), np.float32), np.ones((1, 1, 2, 3), np.float32))
    lib = ctypes.CDLL(_openblas_in_process()[0], mode=getattr(os, "RTLD_NOLOAD", 4) | os.RTLD_LAZY)
    assert lib.scipy_openblas_get_num_threads() == 1


@pytest.mark.parametrize("cin", [32, 256], ids=["l2_tiles", "large_filter_tiles"])
@pytest.mark.parametrize("pool", [1, 2])
def test_inside_tf_data_private_threadpool(cin, pool):
    """tf.data runs the op on its own pool (the device's worker pool for the
    function): the tiles still spread over it and finish (no deadlock)."""
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((6, 1, 10, 10, cin)).astype(np.float32)
    w = (rng.standard_normal((3, 3, cin, cin)) / np.sqrt(9 * cin)).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices(xs).map(
        lambda x: metal_ops.fused_conv2d(x, w, activation="relu"), num_parallel_calls=4)
    options = tf.data.Options()
    options.threading.private_threadpool_size = pool
    got = [y.numpy() for y in ds.with_options(options)]
    for x, y in zip(xs, got):
        np.testing.assert_allclose(y, reference(x, w, act="relu"), rtol=1e-4, atol=2e-4)


# ---- the dependency: pinned once, required by the wheel, found at run time ----
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pins(path):
    import re

    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return re.findall(r"scipy-openblas32==([0-9.]+)", f.read())


@pytest.mark.source_tree("the requirements files")
def test_openblas_pinned_alike_everywhere():
    from importlib import metadata

    pins = {p: _pins(p) for p in ("requirements.txt", "requirements-macos.txt", "requirements-macos-metal.txt",
                                    "pyproject.toml")}
    assert all(len(v) == 1 for v in pins.values()), pins
    assert len({v[0] for v in pins.values()}) == 1, pins
    assert metadata.version("scipy-openblas32") == pins["requirements.txt"][0]


@pytest.mark.source_tree("setup.py")
def test_setup_requires_the_openblas_it_links():
    from importlib import metadata

    from tests.test_build import _load_setup_py

    assert _load_setup_py()._openblas_requirement() == [f"scipy-openblas32=={metadata.version('scipy-openblas32')}"]


def test_library_runpath_reaches_an_installed_openblas():
    """An installed metal_ops (site-packages/metal_ops/_metal_ops.so) finds
    site-packages/scipy_openblas32/lib through $ORIGIN."""
    import subprocess

    from metal_ops import _loader

    if not _loader.library_path().endswith(".so") or not os.path.exists("/proc/self/maps"):
        pytest.skip("ELF check (Linux)")
    out = subprocess.run(["readelf", "-d", _loader.library_path()], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("readelf is not available")
    assert "libscipy_openblas.so" in out.stdout
    assert "$ORIGIN/../scipy_openblas32/lib" in out.stdout
