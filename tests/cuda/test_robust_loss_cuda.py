"""RobustLoss CUDA kernels vs a float64 NumPy reference through the harness
(GPU machines only; skips elsewhere)."""
import ctypes

import numpy as np
import pytest

from tests.cuda.harness import check, dptr, require_gpu, stream_ptr
from tests.reference import robust_loss as ref

INF = float("inf")


def call_forward(cupy, lib, x, alpha, scale, channels, dtype="float32"):
    d_x = cupy.asarray(x)
    d_a, d_s = cupy.asarray(alpha, cupy.float32), cupy.asarray(scale, cupy.float32)
    d_out = cupy.full_like(d_x, np.nan)
    check(getattr(lib, f"metal_ops_robust_loss_forward_{dtype}")(
        dptr(d_x), dptr(d_a), dptr(d_s), dptr(d_out), ctypes.c_int64(x.size), ctypes.c_int64(channels),
        ctypes.c_int(int(d_a.size > 1)), ctypes.c_int(int(d_s.size > 1)), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_out)


def call_backward(cupy, lib, g, x, alpha, scale, channels, dtype="float32"):
    d_g, d_x = cupy.asarray(g), cupy.asarray(x)
    d_a, d_s = cupy.asarray(alpha, cupy.float32), cupy.asarray(scale, cupy.float32)
    d_dx = cupy.full_like(d_x, np.nan)
    d_da, d_ds = cupy.full_like(d_a, np.nan), cupy.full_like(d_s, np.nan)  # the launcher zeroes them
    check(getattr(lib, f"metal_ops_robust_loss_backward_{dtype}")(
        dptr(d_g), dptr(d_x), dptr(d_a), dptr(d_s), dptr(d_dx), dptr(d_da), dptr(d_ds),
        ctypes.c_int64(x.size), ctypes.c_int64(channels), ctypes.c_int(int(d_a.size > 1)),
        ctypes.c_int(int(d_s.size > 1)), stream_ptr(cupy)))
    cupy.cuda.get_current_stream().synchronize()
    return cupy.asnumpy(d_dx), cupy.asnumpy(d_da), cupy.asnumpy(d_ds)


ALPHAS = [-INF, -1e3, -2.0, -0.5, 0.0, 1e-6, 0.5, 1.0, 1.5, 1.999, 2 - 2.4e-7, 2.0, 2.5, 4.0, INF]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_forward_and_backward_match_reference(alpha):
    cupy, lib = require_gpu()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(100_003) * rng.choice([0.01, 1.0, 5.0], size=100_003)).astype(np.float32)
    if alpha in (INF, 4.0):
        x = np.clip(x, -3, 3)
    c = 0.8
    a32 = float(np.float32(alpha))
    out = call_forward(cupy, lib, x, [a32], [c], 1)
    np.testing.assert_allclose(out, ref.rho(x, a32, c), rtol=3e-5, atol=1e-30)
    g = rng.uniform(0.5, 1.5, size=x.size).astype(np.float32)
    dx, da, ds = call_backward(cupy, lib, g, x, [a32], [c], 1)
    rdx, rda, rds = ref.grads(x, a32, c)
    np.testing.assert_allclose(dx, g * rdx, rtol=3e-5, atol=1e-30)
    np.testing.assert_allclose(da[0], np.sum(g * rda), rtol=2e-4, atol=1e-3)
    np.testing.assert_allclose(ds[0], np.sum(g * rds), rtol=2e-4, atol=1e-3)


@pytest.mark.parametrize("channels,alpha_vec,scale_vec", [(3, True, True), (3, True, False), (5, False, True),
                                                          (3000, True, True), (1, False, False)])
@pytest.mark.parametrize("rows", [1, 7, 20_000])
def test_per_channel_reductions(channels, alpha_vec, scale_vec, rows):
    cupy, lib = require_gpu()
    if channels * rows > 3_000_000:
        rows = 3_000_000 // channels
    rng = np.random.default_rng(channels + rows)
    x = rng.standard_normal((rows, channels)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, size=x.shape).astype(np.float32)
    alphas = rng.uniform(-2, 1.9, size=channels).astype(np.float32)
    scales = rng.uniform(0.3, 2.0, size=channels).astype(np.float32)
    alpha = alphas if alpha_vec else alphas[:1]
    scale = scales if scale_vec else scales[:1]
    out = call_forward(cupy, lib, x, alpha, scale, channels)
    dx, da, ds = call_backward(cupy, lib, g, x, alpha, scale, channels)
    want_da, want_ds = np.zeros(channels), np.zeros(channels)
    for ch in range(channels):
        a = float(alpha[ch if alpha_vec else 0])
        c = float(scale[ch if scale_vec else 0])
        np.testing.assert_allclose(out[:, ch], ref.rho(x[:, ch], a, c), rtol=3e-5, atol=1e-30)
        rdx, rda, rds = ref.grads(x[:, ch], a, c)
        np.testing.assert_allclose(dx[:, ch], g[:, ch] * rdx, rtol=3e-5, atol=1e-30)
        want_da[ch], want_ds[ch] = np.sum(g[:, ch] * rda), np.sum(g[:, ch] * rds)
    np.testing.assert_allclose(da, want_da if alpha_vec else want_da.sum(), rtol=2e-4, atol=1e-3)
    np.testing.assert_allclose(ds, want_ds if scale_vec else want_ds.sum(), rtol=2e-4, atol=1e-3)


def test_float16_computes_in_float32():
    cupy, lib = require_gpu()
    x = np.linspace(-4, 4, 4097).astype(np.float16)
    out = call_forward(cupy, lib, x, [1.0], [0.5], 1, "float16")
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), ref.rho(x.astype(np.float32), 1.0, 0.5), rtol=1e-3, atol=1e-3)
    g = np.ones_like(x)
    dx, da, ds = call_backward(cupy, lib, g, x, [1.0], [0.5], 1, "float16")
    rdx, rda, rds = ref.grads(x.astype(np.float32), 1.0, 0.5)
    np.testing.assert_allclose(dx.astype(np.float32), rdx, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(da[0], rda.sum(), rtol=1e-3)


def test_empty_and_no_nan_sweep():
    cupy, lib = require_gpu()
    x = np.zeros(0, np.float32)
    dx, da, ds = call_backward(cupy, lib, x, x, [1.0], [1.0], 1)
    assert da[0] == 0 and ds[0] == 0 and dx.size == 0
    xs = np.concatenate([[0.0], np.logspace(-30, 30, 200), -np.logspace(-30, 30, 200)]).astype(np.float32)
    for alpha in [-INF, -1e30, -2.0, -1e-7, 0.0, 1e-7, 1.0, 1.999, 2.0, 2.0000002, 3.0, 1e3, INF]:
        for c in [1e-3, 1.0, 1e3]:
            out = call_forward(cupy, lib, xs, [alpha], [c], 1)
            dx, da, ds = call_backward(cupy, lib, np.ones_like(xs), xs, [alpha], [c], 1)
            assert np.all(np.isfinite(out)) and np.all(np.isfinite(dx)), (alpha, c)
            assert np.isfinite(da[0]) and np.isfinite(ds[0]), (alpha, c)


@pytest.mark.parametrize("channels", [1, 3])
def test_outputs_may_share_the_input_buffer(channels):
    """The TF kernel class forwards x's buffer to the loss and grad's to grad_x
    (kernels/robust_loss/robust_loss.h): in place gives what a separate output gives."""
    cupy, lib = require_gpu()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((50_001, channels)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, size=x.shape).astype(np.float32)
    alpha = rng.uniform(-2, 1.9, size=channels).astype(np.float32)
    scale = rng.uniform(0.3, 2.0, size=channels).astype(np.float32)
    want = call_forward(cupy, lib, x, alpha, scale, channels)
    want_dx, want_da, want_ds = call_backward(cupy, lib, g, x, alpha, scale, channels)
    d_x, d_g = cupy.asarray(x), cupy.asarray(g)
    d_a, d_s = cupy.asarray(alpha), cupy.asarray(scale)
    d_da, d_ds = cupy.zeros_like(d_a), cupy.zeros_like(d_s)
    vec = ctypes.c_int(int(channels > 1))
    args = (ctypes.c_int64(x.size), ctypes.c_int64(channels), vec, vec, stream_ptr(cupy))
    check(lib.metal_ops_robust_loss_backward_float32(dptr(d_g), dptr(d_x), dptr(d_a), dptr(d_s), dptr(d_g),
                                                     dptr(d_da), dptr(d_ds), *args))
    check(lib.metal_ops_robust_loss_forward_float32(dptr(d_x), dptr(d_a), dptr(d_s), dptr(d_x), *args))
    cupy.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(d_x), want)
    np.testing.assert_array_equal(cupy.asnumpy(d_g), want_dx)
    np.testing.assert_allclose(cupy.asnumpy(d_da), want_da, rtol=1e-5)
    np.testing.assert_allclose(cupy.asnumpy(d_ds), want_ds, rtol=1e-5)
