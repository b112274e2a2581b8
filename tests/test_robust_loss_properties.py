"""RobustLoss: the properties Barron (CVPR 2019) states for rho(x, alpha, c),
checked over one wide random sample of x, alpha and c, in float32 and float16,
with per-channel ([C]) and scalar parameters.

- rho >= 0, rho = 0 at x = 0, rho even in x
- rho non-decreasing in |x|
- rho < (alpha - 2) / alpha for alpha < 0 (never above the float32 value of
  that bound, in float32 or float16: zero violations)
- |d rho / dx| <= |x| / c^2 for alpha <= 2, and <= 1 / c for alpha <= 1
- d rho / d alpha >= 0 (rho is monotone in alpha), d rho / dc <= 0
- rho(k x, alpha, k c) = rho(x, alpha, c)
- alpha in {0, 1, 2, -2, -inf, +inf} give their closed forms
plus values and gradients against float64 / mpmath references, and the
per-channel gradient sums being independent of the number of threads.
"""
import os
import subprocess
import sys

import mpmath
import numpy as np
import pytest
import tensorflow as tf

import metal_ops
from tests.reference import robust_loss as ref
from tests.test_robust_loss import op_with_grads

pytestmark = pytest.mark.every_device

INF = float("inf")
SAT = ref.SATURATION
EPS32 = float(np.finfo(np.float32).eps)
EPS16 = float(np.finfo(np.float16).eps)
SPECIAL = [0.0, 1.0, 2.0, -2.0, -INF, INF]
ROWS, CHANNELS = 1024, 96


# ---- the sample ---------------------------------------------------------------------
def sample_alphas(rng, n):
    """Shapes across the whole real line: wide magnitudes of both signs, near 2,
    near 0, the special values, and the usual range [-3, 3]."""
    pick = rng.integers(0, 7, n)
    mag = 10.0 ** rng.uniform(-6, 4, n)
    near = 10.0 ** rng.uniform(-7, -0.3, n) * rng.choice([-1.0, 1.0], n)
    alpha = np.select(
        [pick == 0, pick == 1, pick == 2, pick == 3, pick == 4, pick == 5],
        [rng.uniform(-20, 20, n), -mag, mag, 2.0 + near, near, rng.choice(SPECIAL, n)],
        rng.uniform(-3, 3, n))
    alpha[: len(SPECIAL)] = SPECIAL  # every special value at least once
    return alpha.astype(np.float32)


def sample_x(rng, shape, dtype):
    """Residuals over many decades (float16: within its range), both signs,
    some exact zeros."""
    hi = 4.5 if dtype == np.float16 else 6.0
    x = rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-6, hi, shape)
    x[rng.uniform(size=shape) < 0.01] = 0.0
    return x.astype(dtype)


@pytest.fixture(scope="module")
def sample():
    rng = np.random.default_rng(20260416)
    alpha = sample_alphas(rng, CHANNELS)
    scale = (10.0 ** rng.uniform(-3, 3, CHANNELS)).astype(np.float32)
    return {"alpha": alpha, "scale": scale,
            "x": {np.float32: sample_x(rng, (ROWS, CHANNELS), np.float32),
                  np.float16: sample_x(rng, (ROWS, CHANNELS), np.float16)}}


def run(x, alpha, scale):
    """rho, d rho/dx, and d rho/d alpha, d rho/dc summed like the parameters."""
    return op_with_grads(x, alpha, scale, dtype=np.asarray(x).dtype)


LAYOUTS = ["per_channel", "scalar"]
DTYPES = [np.float32, np.float16]


_RESULTS = {}


@pytest.fixture
def results(sample, tf_device):
    """{(layout, dtype): (rho, dx, dalpha per channel, dscale per channel)} on the test's device."""
    if tf_device not in _RESULTS:
        _RESULTS[tf_device] = _results(sample)
    return _RESULTS[tf_device]


def _results(sample):
    out = {}
    for dtype in DTYPES:
        x = sample["x"][dtype]
        out[("per_channel", dtype)] = run(x, sample["alpha"], sample["scale"])
        cols = [run(np.ascontiguousarray(x[:, j]), sample["alpha"][j], sample["scale"][j]) for j in range(CHANNELS)]
        out[("scalar", dtype)] = tuple(np.stack([c[i] for c in cols], -1) for i in range(4))
    return out


def params(sample):
    return sample["alpha"][None, :], sample["scale"][None, :]


# ---- references -------------------------------------------------------------------------
def ref_exponent(x, a, c):
    """|y| of rho = (b/a) (e^y - 1) (0.5 z at alpha = +-inf): an argument of exp
    carries |y| ulp of relative error into rho."""
    x, a, c = (np.asarray(v, np.float64) for v in np.broadcast_arrays(x, a, c))
    z = (x / c) ** 2
    b = np.where(np.abs(a - 2) == 0, 1, np.abs(a - 2))
    with np.errstate(all="ignore"):
        y = np.where(np.isinf(a), 0.5 * z, 0.5 * a * np.log1p(z / b))
    return np.minimum(np.nan_to_num(np.abs(y), nan=0.0), 100.0)


def comparable(ref):
    """Elements away from the saturation cap (where the op switches to SAT)."""
    return ~((ref > 0.5 * SAT) & (ref < 2 * SAT))


# ---- the properties ---------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nonnegative_zero_at_zero_and_even(sample, results, layout, dtype):
    rho, gx, _, _ = results[(layout, dtype)]
    x = sample["x"][dtype]
    assert rho.dtype == dtype and rho.shape == x.shape
    assert not np.isnan(rho).any() and not np.isnan(gx).any()
    assert np.all(rho >= 0)
    assert np.all(rho[x == 0] == 0) and np.all(gx[x == 0] == 0)
    assert np.all(np.isfinite(rho) | (dtype == np.float16))  # float16 overflows above 65504
    alpha, scale = params(sample)
    neg = run(-x, sample["alpha"], sample["scale"]) if layout == "per_channel" else None
    if neg is not None:
        np.testing.assert_array_equal(neg[0], rho)
        np.testing.assert_array_equal(neg[1], -gx)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_monotone_in_abs_x(sample, results, layout, dtype):
    rho = results[(layout, dtype)][0].astype(np.float64)
    x = np.abs(sample["x"][dtype].astype(np.float64))
    order = np.argsort(x, axis=0, kind="stable")
    r = np.take_along_axis(rho, order, 0)
    xs = np.take_along_axis(x, order, 0)
    with np.errstate(invalid="ignore"):  # inf - inf where float16 overflows
        drop = np.diff(r, axis=0) < 0
    assert not drop.any(), [(sample["alpha"][j], xs[i, j], xs[i + 1, j], r[i, j], r[i + 1, j])
                            for i, j in zip(*np.nonzero(drop))][:5]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bounded_above_for_negative_alpha(sample, results, layout, dtype):
    rho = results[(layout, dtype)][0]
    a = sample["alpha"]
    with np.errstate(all="ignore"):
        bound32 = np.where(np.isinf(a), np.float32(1), (a - np.float32(2)) / a).astype(np.float32)  # float32 arithmetic
        bound = bound32.astype(dtype)[None, :]
    neg = np.broadcast_to(a[None, :] < 0, rho.shape)
    assert neg.sum() > 10000
    over = neg & (rho > bound)
    assert not over.any(), (rho[over][:5], np.broadcast_to(bound, rho.shape)[over][:5])
    # and the bound is approached: the largest residuals get within float rounding of it
    near = neg & (np.abs(sample["x"][dtype]) / sample["scale"][None, :] > 1e4) & (a[None, :] < -1)
    np.testing.assert_allclose(rho[near], np.broadcast_to(bound, rho.shape)[near], rtol=1e-2)


def test_bound_at_the_reported_point():
    # A point where the E1 form rounded one ulp above (alpha - 2) / alpha.
    x, a, c = np.float32(0.333674), np.float32(-15.7), np.float32(2.4375e-5)
    rho = metal_ops.robust_loss(np.array([x]), a, c).numpy()[0]
    bound = (a - np.float32(2)) / a
    assert rho <= bound
    mp = mpmath.mpf
    b = abs(mp(float(a)) - 2)
    want = b / mp(float(a)) * (((mp(float(x)) / mp(float(c))) ** 2 / b + 1) ** (mp(float(a)) / 2) - 1)
    assert abs(float(rho) - float(want)) <= float(np.spacing(np.float32(want)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_bounds(sample, results, layout, dtype):
    gx = np.abs(results[(layout, dtype)][1].astype(np.float64))
    x = np.abs(sample["x"][dtype].astype(np.float64))
    alpha, scale = params(sample)
    c = scale.astype(np.float64)
    # float32 rounding of the computation, then of the output dtype
    # slack: float32 rounding of the computation, then rounding to the output
    # dtype (relative, absolute in float16's subnormal range; beyond its
    # largest value the rounding is inf)
    if dtype == np.float16:
        rel, atol, top = 1 + 8 * EPS32 + EPS16, 2.0**-25, 65520.0
    else:
        rel, atol, top = 1 + 8 * EPS32, 2.0**-150, np.inf

    def check(mask, bound):
        allowed = np.where(bound * rel >= top, np.inf, bound * rel + atol)
        bad = mask & (gx > allowed)
        assert not bad.any(), (gx[bad][:5], bound[bad][:5])

    check(np.broadcast_to(alpha <= 2, x.shape), x / c**2)
    check(np.broadcast_to(alpha <= 1, x.shape), np.broadcast_to(1 / c, x.shape))


def test_alpha_and_scale_derivative_signs_per_element():
    # One element per channel: the per-channel sums are per-element derivatives.
    rng = np.random.default_rng(5)
    n = 8192
    alpha = sample_alphas(rng, n)
    scale = (10.0 ** rng.uniform(-3, 3, n)).astype(np.float32)
    for dtype in DTYPES:
        x = sample_x(rng, (1, n), dtype)
        rho, gx, ga, gs = run(x, alpha, scale)
        rho32 = run(x.astype(np.float32), alpha, scale)[0]  # float16's rho may underflow
        assert not np.isnan(ga).any() and not np.isnan(gs).any()
        assert np.all(gs <= 0), (alpha[gs > 0][:5], gs[gs > 0][:5])
        # d rho / d alpha >= 0 up to float32 rounding of a quantity that is
        # exactly 0 at x = 0 (terms of size rho cancel to O(rho eps))
        tol = 4 * EPS32 * np.abs(rho32[0].astype(np.float64))
        bad = ga < -tol
        assert not bad.any(), list(zip(x[0][bad][:5], alpha[bad][:5], scale[bad][:5], ga[bad][:5]))
        assert np.mean(ga > 0) > 0.5
        # the scalar layout gives the same per-element derivatives
        for j in range(0, n, 512):
            _, gxj, gaj, gsj = run(x[0, j:j + 1], alpha[j], scale[j])
            # (log / exp of one element and of a vector differ in the last bit;
            # for u = (x/c)^2/|alpha-2| << 1 d rho/d alpha ~ b u^3 / 24 is a
            # difference of O(u^2) terms: absolute error ~ eps rho, as above)
            np.testing.assert_allclose(gaj, ga[j], rtol=3e-5, atol=4 * EPS32 * abs(float(rho32[0, j])))
            np.testing.assert_allclose(gsj, gs[j], rtol=3e-5, atol=1e-37)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scale_invariance(sample, layout):
    x = sample["x"][np.float32][:256]
    alpha, scale = sample["alpha"], sample["scale"]
    base, base_dx, _, _ = run(x, alpha, scale)
    # relative condition of rho in s: |d log rho / d log s| = |x drho/dx / rho|
    with np.errstate(all="ignore"):
        cond = np.nan_to_num(np.abs(x.astype(np.float64) * base_dx / base), nan=0.0)
    for k in [2.0**-7, 0.37, 3.0, 2.0**9]:
        xk, ck = (x * np.float32(k)).astype(np.float32), (scale * np.float32(k)).astype(np.float32)
        js = list(range(CHANNELS)) if layout == "per_channel" else list(range(0, CHANNELS, 7))
        if layout == "per_channel":
            got, want = run(xk, alpha, ck)[0], base
        else:
            got = np.stack([run(np.ascontiguousarray(xk[:, j]), alpha[j], ck[j])[0] for j in js], -1)
            want = np.stack([run(np.ascontiguousarray(x[:, j]), alpha[j], scale[j])[0] for j in js], -1)
        if np.log2(k) == int(np.log2(k)):  # k x and k c exact: the same float32 computation
            np.testing.assert_array_equal(got, want)
        else:  # |x| / c rounds differently (2 ulp), amplified by the condition,
            # plus each side's evaluation error (|y| ulp where rho = (b/a)(e^y - 1))
            w64 = np.abs(want.astype(np.float64))
            y = ref_exponent(x[:, js], alpha[js][None, :], scale[js][None, :])
            tol = 4 * EPS32 * (2 + 2 * cond[:, js] + 2 * y) * w64
            bad = np.abs(got.astype(np.float64) - want) > tol
            assert not bad.any(), (got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_special_alphas_equal_closed_forms(dtype, layout):
    rng = np.random.default_rng(11)
    x = sample_x(rng, (2048, len(SPECIAL)), dtype)
    scale = np.float32([0.3, 1.0, 2e-3, 40.0, 0.7, 5.0])
    alpha = np.float32(SPECIAL)
    if layout == "per_channel":
        rho, gx, _, _ = run(x, alpha, scale)
    else:
        cols = [run(np.ascontiguousarray(x[:, j]), alpha[j], scale[j]) for j in range(len(SPECIAL))]
        rho, gx = np.stack([c[0] for c in cols], -1), np.stack([c[1] for c in cols], -1)
    closed = np.stack([ref.closed_form(x[:, j], a, scale[j]) for j, a in enumerate(SPECIAL)], -1)
    closed = np.minimum(closed, SAT)
    ok = comparable(closed)
    # float32: exponents up to MAX_LOG = 69 carry |y| eps of relative error
    rtol = 1e-5 if dtype == np.float32 else EPS16
    with np.errstate(over="ignore"):
        want = closed.astype(dtype).astype(np.float64)
    np.testing.assert_allclose(rho.astype(np.float64)[ok], want[ok], rtol=rtol, atol=0)


# ---- against references over the wide sample -------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_values_and_dx_match_float64(sample, results, layout):
    rho, gx, _, _ = results[(layout, np.float32)]
    x = sample["x"][np.float32]
    alpha, scale = params(sample)
    want = ref.rho_saturated(x, alpha, scale)
    ok = comparable(want)
    rtol = EPS32 * (16 + 4 * ref_exponent(x, alpha, scale))
    bad = ok & (np.abs(rho - want) > rtol * want + 1e-37)
    a_full = np.broadcast_to(alpha, x.shape)
    assert not bad.any(), list(zip(x[bad], a_full[bad], rho[bad], want[bad]))[:6]
    wdx = ref.drho_dx(x, alpha, scale)
    ok &= want < 0.5 * SAT
    tiny = np.abs(wdx) < np.finfo(np.float32).tiny  # subnormal range: absolute error
    np.testing.assert_allclose(gx[ok & ~tiny], wdx[ok & ~tiny], rtol=2e-5)
    np.testing.assert_allclose(gx[ok & tiny], wdx[ok & tiny], rtol=0, atol=1e-37)


def test_alpha_and_scale_gradients_match_mpmath_per_channel(sample):
    # Per-channel sums of d rho / d alpha and d rho / dc over a few rows,
    # against mpmath derivatives of the general form (alpha not special).
    rng = np.random.default_rng(3)
    js = [j for j in range(CHANNELS) if sample["alpha"][j] not in SPECIAL and abs(sample["alpha"][j]) < 1e3][:24]
    alpha, scale = sample["alpha"][js], sample["scale"][js]
    x = (rng.normal(size=(6, len(js))) * scale * 10.0 ** rng.uniform(-2, 2, (6, len(js)))).astype(np.float32)
    _, _, ga, gs = run(x, alpha, scale)
    want_a, want_c = np.zeros(len(js)), np.zeros(len(js))
    with mpmath.workdps(40):
        accumulate_mp_grads(x, alpha, scale, want_a, want_c)
    np.testing.assert_allclose(ga, want_a, rtol=1e-5, atol=1e-6 * np.abs(want_a).max())
    np.testing.assert_allclose(gs, want_c, rtol=1e-5, atol=1e-6 * np.abs(want_c).max())


def accumulate_mp_grads(x, alpha, scale, want_a, want_c):
    js = range(x.shape[1])
    for i in range(x.shape[0]):
        for k in js:
            xv, av, cv = (mpmath.mpf(float(v)) for v in (x[i, k], alpha[k], scale[k]))
            want_a[k] += float(mpmath.diff(lambda v: ref.mp_rho(xv, v, cv), av))
            want_c[k] += float(mpmath.diff(lambda v: ref.mp_rho(xv, av, v), cv))


# ---- determinism of the per-channel sums --------------------------------------------------
def per_channel_sums():
    """d/dalpha and d/dc of a sum over [40000, 64] with per-channel parameters, as bytes."""
    rng = np.random.default_rng(9)
    x = tf.constant(rng.normal(size=(40000, 64)).astype(np.float32) * 3)
    a = tf.constant(rng.uniform(-3, 3, 64).astype(np.float32))
    c = tf.constant(rng.uniform(0.1, 2, 64).astype(np.float32))
    with tf.GradientTape() as t:
        t.watch([a, c])
        loss = tf.reduce_sum(metal_ops.robust_loss(x, a, c))
    ga, gc = t.gradient(loss, [a, c])
    return np.concatenate([ga.numpy(), gc.numpy()]).tobytes().hex()


_CHILD = """
import sys
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
from tests.test_robust_loss_properties import per_channel_sums
with tf.device("/CPU:0"):
    sys.stdout.write(per_channel_sums())
"""


@pytest.mark.cpu_semantics("the CPU thread pool's partition; a GPU's per-channel sums use float atomics")
def test_per_channel_sums_independent_of_thread_count():
    # This process uses TF's default pool (one thread per core); the child one thread.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    child = subprocess.run([sys.executable, "-c", _CHILD, "1"], env=env, check=True, capture_output=True,
                           text=True).stdout
    here = per_channel_sums()
    assert len(here) == 2 * 64 * 8
    assert child == here


# ---- layouts around the CPU block size -----------------------------------------------------
@pytest.mark.parametrize("rows,channels", [(3000, 1), (700, 7), (9, 511), (5, 513), (3, 3000), (1, 70000)])
def test_channel_counts_around_the_block_size(rows, channels):
    # Blocks of 512 elements start at any column; per-channel coefficients and
    # sums must follow the column (compared with float64 references and with
    # d rho/dc = -(x/c) d rho/dx summed per channel).
    rng = np.random.default_rng(rows * 7919 + channels)
    alpha = rng.uniform(-4, 4, channels).astype(np.float32)
    alpha[::5] = 1.9999  # some channels take the near-2 forms
    scale = (10.0 ** rng.uniform(-1, 1, channels)).astype(np.float32)
    x = (rng.normal(size=(rows, channels)) * 3).astype(np.float32)
    rho, gx, ga, gs = run(x, alpha if channels > 1 else alpha[:1], scale if channels > 1 else scale[:1])
    np.testing.assert_allclose(rho, ref.rho_saturated(x, alpha, scale), rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(gx, ref.drho_dx(x, alpha, scale), rtol=2e-5, atol=1e-30)
    want_gs = (-(x.astype(np.float64) / scale) * gx).sum(0)
    np.testing.assert_allclose(gs, want_gs, rtol=1e-4, atol=1e-6 * np.abs(want_gs).max())
    # d rho / d alpha per channel against central differences of the float64 reference
    # (steps well inside |alpha - 2| and |alpha|: rho is singular in alpha at 2)
    a64 = alpha.astype(np.float64)
    h = np.minimum(1e-4, np.minimum(np.abs(a64 - 2), np.abs(a64)) / 64)
    fd = ((ref.rho_saturated(x, a64 + h, scale) - ref.rho_saturated(x, a64 - h, scale)) / (2 * h)).sum(0)
    np.testing.assert_allclose(ga, fd, rtol=2e-3, atol=1e-4 * np.abs(fd).max())


@pytest.mark.parametrize("shape,pshape", [((4, 0), (0,)), ((0, 5), (5,)), ((0,), ()), ((2, 0, 3), (3,))])
def test_empty_inputs_with_per_channel_parameters(shape, pshape):
    x = np.zeros(shape, np.float32)
    alpha = np.ones(pshape, np.float32)
    rho, gx, ga, gs = run(x, alpha, np.ones(pshape, np.float32))
    assert rho.shape == shape and gx.shape == shape
    assert ga.shape == pshape and gs.shape == pshape and not ga.any() and not gs.any()
