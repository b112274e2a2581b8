"""platform.h's Metal expm1_f / log1p_f, as the GPU compiles them, vs NumPy.

MSL has no expm1 or log1p; kernels/common/platform.h writes both for the
Metal branch, and the MSL shim (tests/metal_shim/msl_shim.h) compiles that
branch as C++ (tests/metal_shim/math_shim.cc). They are compared in float32
against NumPy's float64 expm1 / log1p over magnitudes 1e-30 .. 88, both signs
(log1p: x > -1), plus the special values.

Bounds asserted, in ulp of the float32-rounded true value:
  expm1_f <= 2 ulp (it calls no exp, so MSL's exp accuracy does not enter);
  log1p_f <= 2 ulp with correctly rounded log, and <= 2 + E ulp when every
  log result is off by E = +-4 ulp (four times the 1 ulp Apple's MSL
  specification gives log in precise math): the shim moves each log, exp,
  exp2 and log2 result by E ulp (msl_shim::math_ulp_error).
"""
import ctypes

import numpy as np
import pytest

from tests.metal_shim.shim import load_shim, ptr

MAGNITUDES = np.logspace(-30, np.log10(88.0), 100001).astype(np.float32)
EXPM1_ULP = 2.0
LOG1P_ULP = 2.0
MATH_ERRORS = (0, 4, -4)


@pytest.fixture(scope="module")
def shim():
    lib = load_shim()
    vp = ctypes.c_void_p
    for f in (lib.shim_expm1, lib.shim_log1p):
        f.argtypes = [vp, vp, ctypes.c_int64]
        f.restype = None
    lib.shim_activation_forward.argtypes = [vp, vp, ctypes.c_int64, ctypes.c_int, ctypes.c_float]
    lib.shim_activation_forward.restype = None
    lib.shim_set_math_ulp_error.argtypes = [ctypes.c_int]
    yield lib
    lib.shim_set_math_ulp_error(0)


def run(f, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty_like(x)
    f(ptr(x), ptr(y), x.size)
    return y


def ulp_error(got, exact):
    """|got - exact| in ulp of exact rounded to float32."""
    spacing = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def expm1_inputs():
    return np.concatenate([MAGNITUDES, -MAGNITUDES])


def log1p_inputs():
    below_one = MAGNITUDES[MAGNITUDES < 1.0]
    near_minus_one = -1.0 + np.float32(2.0) ** -np.arange(1, 24, dtype=np.float32)
    return np.concatenate([MAGNITUDES, -below_one, near_minus_one])


# name: (inputs, float64 reference, ulp bound under an injected math error)
FUNCTIONS = {
    "expm1": (expm1_inputs, np.expm1, lambda math_error: EXPM1_ULP),
    "log1p": (log1p_inputs, np.log1p, lambda math_error: LOG1P_ULP + abs(math_error)),
}


@pytest.mark.parametrize("math_error", MATH_ERRORS)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_matches_numpy(shim, name, math_error):
    inputs, reference, ulp_bound = FUNCTIONS[name]
    shim.shim_set_math_ulp_error(math_error)
    x = inputs()
    err = ulp_error(run(getattr(shim, f"shim_{name}"), x), reference(x.astype(np.float64)))
    worst = int(np.argmax(err))
    bound = ulp_bound(math_error)
    assert err[worst] <= bound, f"{name}_f({x[worst]!r}) is off by {err[worst]:.2f} ulp (bound {bound})"


def test_the_bounds_catch_the_naive_forms():
    """exp(x) - 1 and log(1 + x), the forms platform.h had, fail the same check."""
    x = expm1_inputs()
    naive = np.exp(x) - np.float32(1)
    assert ulp_error(naive, np.expm1(x.astype(np.float64))).max() > 1e3
    x = log1p_inputs()
    naive = np.log(np.float32(1) + x)
    assert ulp_error(naive, np.log1p(x.astype(np.float64))).max() > 1e3


def test_special_values(shim):
    shim.shim_set_math_ulp_error(0)
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 89.0, 1e30, -104.0, -1e30], np.float32)
    got = run(shim.shim_expm1, x)
    np.testing.assert_array_equal(got, [0.0, -0.0, np.inf, -1.0, np.nan, np.inf, np.inf, -1.0, -1.0])
    assert np.signbit(got[1])
    near_overflow = np.array([88.7], np.float32)
    assert ulp_error(run(shim.shim_expm1, near_overflow), np.expm1(near_overflow.astype(np.float64)))[0] <= EXPM1_ULP
    x = np.array([0.0, -0.0, np.inf, -1.0, -1.5, -np.inf, np.nan, 3e38], np.float32)
    got = run(shim.shim_log1p, x)
    np.testing.assert_array_equal(got, [0.0, -0.0, np.inf, -np.inf, np.nan, np.nan, np.nan,
                                        np.float32(np.log1p(np.float64(np.float32(3e38))))])
    assert np.signbit(got[1])


@pytest.mark.parametrize("math_error", MATH_ERRORS)
def test_activations_keep_small_values(shim, math_error):
    """softplus(-20) = 2.06e-9 (log(1 + e^z) gave 0) and elu near 0, through the Metal branch."""
    shim.shim_set_math_ulp_error(math_error)
    z = np.array([-20.0, -30.0, -1e-6, -1e-3, -5.0], np.float32)
    softplus = run(lambda a, b, n: shim.shim_activation_forward(a, b, n, 8, 0.0), z)
    np.testing.assert_allclose(softplus, np.log1p(np.exp(z.astype(np.float64))), rtol=2e-6)
    elu = run(lambda a, b, n: shim.shim_activation_forward(a, b, n, 3, 0.0), z)
    np.testing.assert_allclose(elu, np.expm1(z.astype(np.float64)), rtol=2e-6)
