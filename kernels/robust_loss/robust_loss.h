// Barron's general and adaptive robust loss (CVPR 2019). This header is the
// op's one description shared by every backend: the formulas (written once
// for the CPU kernels, CUDA, the Metal shaders and the MSL shim; see
// platform.h), the op's declaration (no attribute but its type T:
// MO_ROBUST_LOSS_ATTRS is empty) and, in host code, the checks, the Metal
// plans' and CUDA launchers' signatures, the CPU bodies and the TensorFlow
// kernel classes. The op's files (docs/ADDING_AN_OP.md):
//   robust_loss_op.cc     REGISTER_OP                 robust_loss_cpu.cc    CPU kernels, XLA host handlers
//   robust_loss.cu.cc     CUDA kernels, launchers     robust_loss_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   robust_loss.metal     Metal shaders               robust_loss_metal.cc  Metal plans, tensorflow-metal glue
//   robust_loss_xla.cc    XLA op kernels
//
//   rho(x, a, c) = |a-2|/a * (((x/c)^2/|a-2| + 1)^(a/2) - 1)
//
// Evaluated in a form without cancellation anywhere in the valid domain
// (c > 0, a not NaN): with s = |x|/c, b = |a-2|, u = s^2/b, L = log1p(u),
// y = a L / 2 and E1(y) = expm1(y)/y,
//
//   rho        = (b/2) L E1(y)                      (a = 0 gives log1p(s^2/2))
//   drho/dx    = sign(x)/c * s * exp((a/2 - 1) L)
//   drho/dc    = -(x/c) drho/dx
//   drho/da    = (sigma/2) E1(y) D(u) + (L/4) E1'(y) (b L - sigma a r)
//
// with sigma = sign(a-2), r = u/(1+u) and D(u) = log1p(u) - r (series for small
// u). No division by a or b: alpha = 0 and alpha within 1 ulp of 2 are
// evaluated by the same formula without loss. alpha = 2 (b = 0), -inf and +inf
// are their own closed forms. drho/dalpha at alpha = 2 is +infinity in the
// limit (the slope grows like (s^2/4) log(1/|a-2|)); there we return 0, as the
// reference implementation does (its alpha == 2 branch does not depend on
// alpha). For |alpha - 2| < 1/2 the form above cancels as alpha -> 2; there
// drho/da = b (P L / 2a + L E1(t) / 4 - (2+a) expm1(y) / 2a^2), P = e^y,
// t = (a/2 - 1) L (its terms are O(b) each, so the cancellation does not grow
// as b -> 0), for u >= 1/4; for u < 1/4 (where that form too cancels, the
// true value being ~ b u^3 / 24) the binomial series
//   (b u^2 / 4) sum_{k>=3} (sigma b P_k' - (k-2) P_k) u^(k-2) / k!,
//   P_k = prod_{j=2}^{k-1} (a/2 - j)   (14 terms).
// Where e^y would overflow (y > MAX_EXP) the form (b P / 2a)(L - (2+a)/a) +
// sigma (exp(t)/2 - 2/a^2), an identity for every alpha > 0, is evaluated
// through logs.
//
// Bound: for alpha < 0, rho < b/(-alpha) = (alpha-2)/alpha. Where y <= -1/2
// rho is evaluated as bound * (1 - e^y) with bound the float32 (alpha-2)/alpha:
// 1 - e^y <= 1 after rounding, so the result never exceeds the bound (the
// E1 form rounds L / y and can land an ulp above it). For |y| < 1/2 rho is
// below half the bound.
//
// Large exponents go through logs, and rho saturates at
// exp(MO_ROBUST_LOSS_MAX_LOG) ~ 9.25e29 with zero gradients (every branch,
// alpha = 2 included), the role of the reference's expm1_safe clamp: values
// and gradients stay finite, and a float32 sum of up to 2^28 saturated
// elements stays finite too (docs/ROBUST_LOSS.md). Invalid parameters (c <= 0 or
// NaN, alpha NaN) give NaN for the element and its gradients; the CPU kernel
// and the Python wrapper raise InvalidArgument before that can happen.
#ifndef MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_H_
#define MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
// alpha and scale are float32 tensors of one element (broadcast to all of x)
// or of `channels` elements (broadcast along the last axis of x).
struct RobustLossParams {
  int64 num_elements;  // elements of x
  int64 channels;      // last dimension of x when a parameter is per-channel, else 1
  int64 rows;          // num_elements / channels
  int64 alpha_vec;     // 1 when alpha has `channels` elements, 0 when it is a scalar
  int64 scale_vec;     // same for scale
};

// The shaders' buffer indices (robust_loss.metal, the plans of robust_loss_metal.cc).
enum RobustLossBuffers {
  kRobustLossX = 0,       // forward: x
  kRobustLossAlpha = 1,   // forward: alpha
  kRobustLossScale = 2,   // forward: scale
  kRobustLossOut = 3,     // forward: loss
  kRobustLossParams = 4,  // forward: RobustLossParams
  kRobustLossGradGrad = 0,
  kRobustLossGradX = 1,
  kRobustLossGradAlpha = 2,
  kRobustLossGradScale = 3,
  kRobustLossGradDx = 4,
  kRobustLossGradDalpha = 5,
  kRobustLossGradDscale = 6,
  kRobustLossGradParams = 7,
};

#define MO_ROBUST_LOSS_MAX_EXP 43.0f  // above this exponent, work with logs
#define MO_ROBUST_LOSS_MAX_LOG 69.0f  // rho saturates at exp(69) ~ 9.25e29 (gradients 0)
#define MO_ROBUST_LOSS_BIG_Q 1.0e15f  // s/sqrt(b) above this: log1p(u) = 2 log(s/sqrt(b))

// The small helpers below compute both sides of their switch and select, so
// that loops over them vectorise (the CPU kernel's block path); the results
// are the same as with branches.

// E1(y) = expm1(y) / y, with E1(0) = 1; ey = exp(y) (used for |y| >= 1/2).
MO_FN float rl_e1_from(float y, float ey) {
  const bool small = fabs_f(y) < 0.5f;
  const float series = 1.0f + y * (0.5f + y * (1.0f / 6.0f + y * (1.0f / 24.0f + y * (1.0f / 120.0f +
                       y * (1.0f / 720.0f + y * (1.0f / 5040.0f + y * (1.0f / 40320.0f)))))));
  return small ? series : (ey - 1.0f) / (small ? 1.0f : y);
}
MO_FN float rl_e1(float y) { return rl_e1_from(y, exp_f(y)); }

// E1'(y) = (y e^y - expm1(y)) / y^2, with E1'(0) = 1/2; ey = exp(y).
MO_FN float rl_e1_prime_from(float y, float ey) {
  const bool small = fabs_f(y) < 0.5f;
  const float series = 0.5f + y * (1.0f / 3.0f + y * (0.125f + y * (1.0f / 30.0f + y * (1.0f / 144.0f +
                       y * (1.0f / 840.0f + y * (1.0f / 5760.0f + y * (1.0f / 45360.0f)))))));
  const float yy = small ? 1.0f : y;
  return small ? series : (ey * (y - 1.0f) + 1.0f) / (yy * yy);
}

// log1p(u) for u >= 0 from w = 1 + u and log(w), branch-free: platform.h's
// two pieces of log1p (a series near 0, the corrected log elsewhere).
MO_FN float rl_log1p_from(float u, float w, float log_w) {
  return log1p_series_range(u) ? log1p_series_f(u) : log1p_from_log_f(u, w, log_w);
}

// D(u) = log1p(u) - u/(1+u) given L = log1p(u) and r = u/(1+u).
MO_FN float rl_d_from(float u, float L, float r) {
  // sum_{n>=2} (-1)^n (n-1)/n u^n for small u
  const float series = u * u * (0.5f - u * (2.0f / 3.0f - u * (0.75f - u * (0.8f - u * (5.0f / 6.0f -
                       u * (6.0f / 7.0f - u * 0.875f))))));
  return u < 0.1f ? series : L - r;
}

// Per-(alpha, scale) constants, computed once per channel by the kernels.
struct RobustLossCoeffs {
  float alpha;
  float inv_scale;     // 1 / c
  float b;             // |alpha - 2|
  float inv_sqrt_b;    // 1 / sqrt(b)
  float sigma;         // sign(alpha - 2) (-1 at alpha = 2, unused there)
  float bound;         // b / -alpha = (alpha - 2) / alpha for alpha < 0 (sup of rho), else 0
  float b_over_alpha;  // b / alpha for alpha > 0 (near-2 form), else 0
  float near2_c;       // (2 + alpha) / alpha for alpha > 0, else 0
  float near2_d;       // 2 / alpha^2 for alpha > 0, else 0
  float near2_e;       // b (2 + alpha) / (2 alpha^2) for alpha > 0, else 0
  float log_b_alpha;   // log(b / alpha) (alpha > 0) for the large-exponent forms
  float log_q0;        // log(1 / (c sqrt(b))): log q = log|x| + log_q0 when x / c overflows
  float log_inv_scale; // log(1 / c)
  int32 kind;          // 0 general, 1 alpha = 2, 2 alpha = -inf, 3 alpha = +inf, -1 invalid
  int32 pad;
};

MO_FN bool robust_loss_params_valid(float alpha, float scale) {
  return scale > 0.0f && !isnan_f(alpha) && !isinf_f(scale);
}

MO_FN RobustLossCoeffs robust_loss_coeffs(float alpha, float scale) {
  RobustLossCoeffs k;
  k.alpha = alpha;
  k.inv_scale = 1.0f / scale;
  k.b = fabs_f(alpha - 2.0f);
  k.inv_sqrt_b = 1.0f / sqrt_f(k.b);
  k.sigma = alpha > 2.0f ? 1.0f : -1.0f;
  k.bound = alpha < 0.0f ? (isinf_f(alpha) ? 1.0f : k.b / -alpha) : 0.0f;
  k.b_over_alpha = alpha > 0.0f ? k.b / alpha : 0.0f;
  k.near2_c = alpha > 0.0f ? (2.0f + alpha) / alpha : 0.0f;
  k.near2_d = alpha > 0.0f ? 2.0f / (alpha * alpha) : 0.0f;
  k.near2_e = alpha > 0.0f ? 0.5f * k.b * k.near2_c / alpha : 0.0f;
  k.log_b_alpha = alpha > 0.0f ? log_f(k.b / alpha) : 0.0f;
  k.log_inv_scale = -log_f(scale);
  k.log_q0 = k.log_inv_scale - 0.5f * log_f(k.b);
  k.pad = 0;
  if (!robust_loss_params_valid(alpha, scale)) {
    k.kind = -1;
  } else if (alpha == 2.0f) {
    k.kind = 1;
  } else if (isinf_f(alpha)) {
    k.kind = alpha < 0.0f ? 2 : 3;
  } else {
    k.kind = 0;
  }
  return k;
}

// L = log1p(u), r = u/(1+u), D = L - r, w = 1 + u (inf when huge) for
// u = q^2, q = s/sqrt(b), s = |x|/c, without overflow: when q is huge (or x / c
// itself overflows float32) log1p(u) = 2 log q = 2 (log|x| + log_q0).
MO_FN void rl_log_terms(float ax, RobustLossCoeffs k, MO_THREAD float& q, MO_THREAD float& L,
                        MO_THREAD float& r, MO_THREAD float& D, MO_THREAD float& w) {
  q = ax * k.inv_scale * k.inv_sqrt_b;
  if (q >= MO_ROBUST_LOSS_BIG_Q) {  // u >= 1e30: log1p(u) = log(u) to float precision
    L = 2.0f * (log_f(ax) + k.log_q0);
    r = 1.0f;
    D = L - 1.0f;
    w = INFINITY;
    return;
  }
  const float u = q * q;
  w = 1.0f + u;
  L = rl_log1p_from(u, w, log_f(w));
  r = u / w;
  D = rl_d_from(u, L, r);
}

// The stage functions below are the common case of the general branch (alpha
// finite, not 2), shared by the scalar functions and the CPU kernel's
// vectorised block path; they are branch-free. y = a L / 2, ey = exp(y),
// e1 = E1(y).

// rho = (b/2) L E1(y); for alpha < 0 and y <= -1/2 the bound-safe form
// bound * (1 - e^y) (see the top of this file).
MO_FN float rl_general_rho(RobustLossCoeffs k, float L, float y, float ey, float e1) {
  const bool tail = k.alpha < 0.0f && y <= -0.5f;
  return tail ? k.bound * (1.0f - ey) : 0.5f * k.b * L * e1;
}

MO_FN float rl_general_value(RobustLossCoeffs k, float L, float y, float ey) {
  return rl_general_rho(k, L, y, ey, rl_e1_from(y, ey));
}

// Whether rl_general_value gives the full function's answer: kind 0, u finite,
// no large exponent.
MO_FN bool rl_general_value_ok(RobustLossCoeffs k, float q, float y) {
  return k.kind == 0 && q < MO_ROBUST_LOSS_BIG_Q && y <= MO_ROBUST_LOSS_MAX_EXP;
}

// Whether d rho / d alpha needs the near-2 form (u >= 1/4), or the series
// (u < 1/4); r = u / (1 + u).
MO_FN bool rl_near2(RobustLossCoeffs k, float r) { return k.b < 0.5f && r >= 0.2f; }
MO_FN bool rl_near2_series(RobustLossCoeffs k, float r) { return k.b < 0.5f && r < 0.2f; }

// d rho / d alpha near alpha = 2 for u < 1/4: the binomial series (top of file).
// A fixed number of terms, so the CPU block path vectorises it.
MO_FN float rl_dalpha_series(RobustLossCoeffs k, float u) {
  const float h = 0.5f * k.alpha;
  float p = 1.0f, dp = 0.0f;  // P_k and dP_k/dalpha, from k = 2
  float term = 0.5f;          // u^(k-2) / k!, from k = 2
  float sum = 0.0f;
  for (int i = 3; i <= 16; ++i) {
    const float f = h - (float)(i - 1);
    dp = dp * f + 0.5f * p;
    p = p * f;
    term *= u / (float)i;
    sum += (k.sigma * k.b * dp - (float)(i - 2) * p) * term;
  }
  return 0.25f * k.b * u * u * sum;
}

// d rho / d alpha, general form.
MO_FN float rl_dalpha_general(RobustLossCoeffs k, float L, float r, float D, float y, float ey,
                              float e1) {
  return 0.5f * k.sigma * e1 * D +
         0.25f * L * rl_e1_prime_from(y, ey) * (k.b * L - k.sigma * k.alpha * r);
}

// d rho / d alpha near alpha = 2 (u >= 1/4), given e^y, E1(y), t and exp(t).
MO_FN float rl_dalpha_near2(RobustLossCoeffs k, float L, float y, float ey, float e1, float t,
                            float exp_t) {
  return 0.5f * k.b_over_alpha * ey * L + 0.25f * k.b * L * rl_e1_from(t, exp_t) - k.near2_e * (y * e1);
}

// d rho / d alpha for alpha > 0 through logs (large y), given bp_a = (b/a) e^y and exp(t).
MO_FN float rl_dalpha_log_form(RobustLossCoeffs k, float L, float bp_a, float exp_t) {
  return 0.5f * bp_a * (L - k.near2_c) + k.sigma * (0.5f * exp_t - k.near2_d);
}

// Valid where rl_general_grads_ok: rho, drho/dx, drho/dalpha, drho/dscale from
// the log terms and one exponential (exp(t) = e^y / (1 + u)). with_series =
// false leaves out the near-2 series (where rl_near2_series holds d_alpha is
// then not accurate): the CPU block path adds it only to blocks that need it.
MO_FN void rl_general_grads(float x, float s, RobustLossCoeffs k, float u, float L, float r, float D,
                            float w, float y, float ey, bool with_series, MO_THREAD float& rho,
                            MO_THREAD float& d_x, MO_THREAD float& d_alpha,
                            MO_THREAD float& d_scale) {
  const float e1 = rl_e1_from(y, ey);
  rho = rl_general_rho(k, L, y, ey, e1);
  const float et = ey / w;
  const float da_general = rl_dalpha_general(k, L, r, D, y, ey, e1);
  const float da_near2 = rl_dalpha_near2(k, L, y, ey, e1, (0.5f * k.alpha - 1.0f) * L, et);
  d_alpha = rl_near2(k, r) ? da_near2 : da_general;
  if (with_series && rl_near2_series(k, r)) d_alpha = rl_dalpha_series(k, u);
  const float se = s * et;
  const float sign = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  d_x = sign * se * k.inv_scale;
  d_scale = -(s * se) * k.inv_scale;
}

// Whether rl_general_grads gives the full function's answer: kind 0, u finite
// (q below MO_ROBUST_LOSS_BIG_Q), no large exponent, no underflow of exp(t)
// with t = (a/2 - 1) L.
MO_FN bool rl_general_grads_ok(RobustLossCoeffs k, float q, float y, float L) {
  return rl_general_value_ok(k, q, y) && (0.5f * k.alpha - 1.0f) * L > -80.0f;
}

// rho for one element given its channel's coefficients.
MO_FN float robust_loss_value_k(float x, RobustLossCoeffs k) {
  const float s = fabs_f(x) * k.inv_scale;
  const float sat = exp_f(MO_ROBUST_LOSS_MAX_LOG);
  if (k.kind == 0) {
    float q, L, r, D, w;
    rl_log_terms(fabs_f(x), k, q, L, r, D, w);
    if (isinf_f(L)) return k.alpha < 0.0f ? k.bound : (k.alpha == 0.0f ? L : sat);  // x = +-inf
    const float y = 0.5f * k.alpha * L;
    if (y > MO_ROBUST_LOSS_MAX_EXP) {  // alpha > 0 here: rho = (b/a) e^y - b/a via logs
      const float log_rho = y + k.log_b_alpha;
      return log_rho > MO_ROBUST_LOSS_MAX_LOG ? sat : exp_f(log_rho) - k.b / k.alpha;
    }
    return rl_general_value(k, L, y, exp_f(y));
  }
  const float h = 0.5f * s * s;
  if (k.kind == 1) return h > sat ? sat : h;
  if (k.kind == 2) return -expm1_f(-h);
  if (k.kind == 3) return h > MO_ROBUST_LOSS_MAX_LOG ? sat : expm1_f(h);
  return NAN;
}

// rho(x, alpha, scale).
MO_FN float robust_loss_value(float x, float alpha, float scale) {
  return robust_loss_value_k(x, robust_loss_coeffs(alpha, scale));
}

// rho and its three partial derivatives at one element.
MO_FN void robust_loss_grads_k(float x, RobustLossCoeffs k, MO_THREAD float& rho,
                               MO_THREAD float& d_x, MO_THREAD float& d_alpha,
                               MO_THREAD float& d_scale) {
  if (k.kind < 0 || isnan_f(x)) {
    rho = NAN;
    d_x = NAN;
    d_alpha = NAN;
    d_scale = NAN;
    return;
  }
  const float alpha = k.alpha;
  const float s = fabs_f(x) * k.inv_scale;
  const float sign = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  float t = 0.0f;       // log of (1 + u)^(alpha/2 - 1): drho/ds = s exp(t)
  float exp_t = 1.0f;   // exp(t) when known without another exp
  bool have_exp_t = true;
  bool saturated = false;
  const float sat = exp_f(MO_ROBUST_LOSS_MAX_LOG);
  d_alpha = 0.0f;
  if (k.kind == 1) {
    rho = 0.5f * s * s;
    saturated = rho > sat;
  } else if (k.kind == 2) {
    const float h = 0.5f * s * s;
    rho = -expm1_f(-h);
    t = -h;
    have_exp_t = false;
  } else if (k.kind == 3) {
    const float h = 0.5f * s * s;
    if (h > MO_ROBUST_LOSS_MAX_LOG) {
      saturated = true;
    } else {
      rho = expm1_f(h);
      t = h;
      have_exp_t = false;
    }
  } else {
    float q, L, r, D, w;
    rl_log_terms(fabs_f(x), k, q, L, r, D, w);
    if (isinf_f(L)) {  // x = +-inf: the limits, with zero slopes in x and c
      rho = alpha < 0.0f ? k.bound : (alpha == 0.0f ? L : sat);
      d_x = 0.0f;
      d_alpha = alpha < 0.0f ? 2.0f / (alpha * alpha) : 0.0f;
      d_scale = 0.0f;
      return;
    }
    const float y = 0.5f * alpha * L;
    t = (0.5f * alpha - 1.0f) * L;
    if (rl_general_grads_ok(k, q, y, L)) {
      rl_general_grads(x, s, k, q * q, L, r, D, w, y, exp_f(y), true, rho, d_x, d_alpha, d_scale);
      return;
    }
    if (y > MO_ROBUST_LOSS_MAX_EXP) {
      // alpha > 0 here: rho = (b/a) e^y - b/a and the near-2 form of d rho/d alpha
      // (an identity for every alpha > 0), through logs.
      const float log_bp = y + k.log_b_alpha;
      if (log_bp > MO_ROBUST_LOSS_MAX_LOG) {
        saturated = true;
      } else {
        const float bp_a = exp_f(log_bp);  // b e^y / a
        exp_t = exp_f(t);
        rho = bp_a - k.b / alpha;
        d_alpha = rl_dalpha_log_form(k, L, bp_a, exp_t);
      }
    } else {
      // u huge or exp(t) underflows: rho and d rho/d alpha as in rl_general_grads,
      // d rho/dx and d rho/dc through logs below.
      const float ey = exp_f(y);
      const float e1 = rl_e1_from(y, ey);
      rho = rl_general_rho(k, L, y, ey, e1);
      d_alpha = rl_near2(k, r) ? rl_dalpha_near2(k, L, y, ey, e1, t, exp_f(t))
                               : rl_near2_series(k, r) ? rl_dalpha_series(k, q * q)
                                                       : rl_dalpha_general(k, L, r, D, y, ey, e1);
      have_exp_t = false;
    }
  }
  if (saturated) {
    rho = sat;
    d_x = 0.0f;
    d_alpha = 0.0f;
    d_scale = 0.0f;
    return;
  }
  if (t < -80.0f || isinf_f(s)) {  // s exp(t) would underflow (or s overflow): go through logs
    const float ls = log_f(fabs_f(x)) + k.log_inv_scale;  // log s, also where x / c overflows
    d_x = sign * exp_f(t + ls + k.log_inv_scale);  // 1/c inside: no underflow before it
    d_scale = -exp_f(t + 2.0f * ls + k.log_inv_scale);
  } else {
    const float se = s * (have_exp_t ? exp_t : exp_f(t));
    d_x = sign * se * k.inv_scale;
    d_scale = -(s * se) * k.inv_scale;
  }
}

// Index of the alpha / scale element used by an element of x in channel
// `col` (its flat index modulo channels, kept by the caller).
MO_FN int64 robust_loss_param_index(int64 col, int64 is_vec) { return is_vec != 0 ? col : 0; }

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsRobustLoss(x, alpha, scale) -> loss (x's shape) and
// MetalOpsRobustLossGrad(grad, x, alpha, scale) -> grad_x, grad_alpha,
// grad_scale; T in {float, half, bfloat16}, alpha and scale float32; no other
// attribute.
#define MO_ROBUST_LOSS_ATTRS(ATTR)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cmath>

#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace robust_loss {

// Attrs {} (none), ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("RobustLoss", MO_ROBUST_LOSS_ATTRS);

// The checks, written once for every kernel of the op: the CPU and CUDA
// kernels (the kernel classes below), XLA's op kernels and handlers and the
// Metal kernels (through KernelCall::Check). No TensorFlow API: sizes and
// values in, kernels/spec/checks.h's Result out. Messages name the argument;
// tests match on them.
// How alpha and scale broadcast over x: one value, or one per channel (the
// last dimension of x).
struct ParamLayout {
  int64_t channels = 1;
  bool alpha_vec = false;
  bool scale_vec = false;
};

inline int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// One parameter: one element (scalar or [1]) or [C] with C = last dim of x.
inline Result ParamShape(const Dims& x, const Dims& p, const char* name, bool* is_vec) {
  if (p.size() > 1) {
    return Invalid("RobustLoss: '", name, "' must be a scalar or a vector, got shape ", ShapeString(p));
  }
  *is_vec = NumElements(p) != 1;
  if (*is_vec && (x.empty() || p.empty() || p[0] != x.back())) {
    return Invalid("RobustLoss: '", name, "' has shape ", ShapeString(p),
                   " but must be a scalar, [1] or [C] with C the last dimension of 'x' (shape ", ShapeString(x), ")");
  }
  return Ok();
}

// alpha and scale against x, and the layout they give.
inline Result ParamShapes(const Dims& x, const Dims& alpha, const Dims& scale, ParamLayout* layout) {
  MO_RETURN_IF_INVALID(ParamShape(x, alpha, "alpha", &layout->alpha_vec));
  MO_RETURN_IF_INVALID(ParamShape(x, scale, "scale", &layout->scale_vec));
  layout->channels = (layout->alpha_vec || layout->scale_vec) ? x.back() : 1;
  return Ok();
}

// The values of alpha and scale, where they are in host memory (CPU).
inline Result ParamValues(const float* alpha, int64_t num_alpha, const float* scale, int64_t num_scale) {
  for (int64_t i = 0; i < num_alpha; ++i) {
    if (std::isnan(alpha[i])) return Invalid("RobustLoss: 'alpha' must not be NaN (alpha[", i, "] is NaN)");
  }
  for (int64_t i = 0; i < num_scale; ++i) {
    if (!(scale[i] > 0.0f) || std::isinf(scale[i])) {
      return Invalid("RobustLoss: 'scale' must be positive and finite, got scale[", i, "] = ", scale[i]);
    }
  }
  return Ok();
}

// The upstream gradient of RobustLossGrad has the shape of x.
inline Result GradShape(const Dims& grad, const Dims& x) {
  if (grad != x) {
    return Invalid("RobustLossGrad: 'grad' has shape ", ShapeString(grad), " but 'x' has shape ", ShapeString(x));
  }
  return Ok();
}

}  // namespace robust_loss
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (robust_loss_metal.cc), every Metal path's
// (kernels/metal_plan/plan.h): forward slots {x, alpha, scale, loss};
// backward {grad, x, alpha, scale, dx, dalpha, dscale}. n elements (the
// backward zero-fills dalpha and dscale, float32 tensors of alpha_count /
// scale_count elements, also when n == 0).
namespace mo::metal_plan {
enum RobustLossSlots { kRobustLossSlotX, kRobustLossSlotAlpha, kRobustLossSlotScale, kRobustLossSlotOut, kRobustLossSlots };
enum RobustLossGradSlots {
  kRobustLossGradSlotGrad,
  kRobustLossGradSlotX,
  kRobustLossGradSlotAlpha,
  kRobustLossGradSlotScale,
  kRobustLossGradSlotDx,
  kRobustLossGradSlotDalpha,
  kRobustLossGradSlotDscale,
  kRobustLossGradSlots
};
struct RobustLossLayout {
  int64_t num_elements;
  int64_t channels;     // robust_loss::ParamShapes
  bool alpha_vec;
  bool scale_vec;
};
Plan RobustLossForward(Dtype dtype, const RobustLossLayout& layout);
// The backward's grid: threads loop over rows; the cap bounds the number of atomics.
constexpr uint64_t kRobustLossMaxGradThreads = uint64_t(1) << 16;
Plan RobustLossBackward(Dtype dtype, const RobustLossLayout& layout, int64_t alpha_count, int64_t scale_count);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// The CUDA launchers (robust_loss.cu.cc), plain C++ (no TensorFlow): the TF
// GPU kernels and XLA's CUDA handlers (robust_loss_cuda.cc) and the C-ABI
// harness (tests/cuda/robust_loss_harness.cu.cc).
namespace mo::cuda {
// out[i] = rho(x[i], alpha[col], scale[col]), col = i % channels for a
// per-channel parameter (alpha_vec / scale_vec), else element 0. T is float,
// __half or __nv_bfloat16 (computed in float). out may be x.
template <typename T>
cudaError_t LaunchRobustLossForward(const T* x, const float* alpha, const float* scale, T* out,
                                    int64_t n, int64_t channels, bool alpha_vec, bool scale_vec,
                                    cudaStream_t stream);

// dx[i] = grad[i] * drho/dx; dalpha / dscale (one element, or `channels`) receive
// the sums of grad * drho/dalpha, grad * drho/dscale (zeroed here first).
// Per-thread register sums, block reduction in shared memory, one atomicAdd
// per block and channel. dx may be grad.
template <typename T>
cudaError_t LaunchRobustLossBackward(const T* grad, const T* x, const float* alpha,
                                     const float* scale, T* dx, float* dalpha, float* dscale,
                                     int64_t n, int64_t channels, bool alpha_vec, bool scale_vec,
                                     cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_CPU_BODIES)
// The CPU kernels' bodies, free of TensorFlow (robust_loss_cpu.cc runs them on
// TF's thread pool; tests/neon/cpu_ops_main.cc builds them for arm64 and runs
// them under qemu); a file that wants them defines MO_CPU_BODIES before the
// include, so the other host code of the op needs no Eigen: a block path with
// Eigen's SIMD log / exp (AVX-512, AVX, SSE or NEON, whatever the build
// targets).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "Eigen/Core"  // host

namespace mo {
namespace robust_loss_cpu {

// ---- Vectorised block path ---------------------------------------------------------
// The formula's stages from kernels/robust_loss/robust_loss.h over blocks of
// kBlock elements, with the two transcendental functions done by Eigen's SIMD
// log / exp over each block; the stage loops are branch-free and vectorise.
// Per-element coefficients come from a CoeffTile, so scalar and per-channel
// parameters take the same path. Elements outside the common case
// (rl_general_*_ok false: huge |x|, large exponents, underflowing exp(t),
// alpha = 2 or +-inf in a per-channel layout, NaN) are redone with the scalar
// functions, so results equal the scalar path's up to log / exp rounding.
constexpr int64_t kBlock = 512;

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// The coefficients used by the block path, one array per field (SoA) of
// length channels + kBlock, entry i holding channel i % channels: a block that
// starts in column col0 reads its element j at [col0 + j], contiguously.
class CoeffTile {
 public:
  explicit CoeffTile(const std::vector<mo::RobustLossCoeffs>& coeffs)
      : channels_(static_cast<int64_t>(coeffs.size())),
        len_(channels_ == 0 ? 0 : channels_ + kBlock),
        data_(kFloatFields * len_),
        kind_(len_) {
    if (channels_ == 0) return;  // unused (closed forms)
    for (int64_t i = 0; i < len_; ++i) {
      const mo::RobustLossCoeffs& k = coeffs[i % channels_];
      const float fields[kFloatFields] = {k.alpha, k.inv_scale,    k.b,      k.inv_sqrt_b,
                                          k.sigma, k.bound, k.b_over_alpha, k.near2_e};
      for (int f = 0; f < kFloatFields; ++f) data_[f * len_ + i] = fields[f];
      kind_[i] = k.kind;
    }
    for (const mo::RobustLossCoeffs& k : coeffs) has_near2_ = has_near2_ || (k.kind == 0 && k.b < 0.5f);
  }
  int64_t channels() const { return channels_; }
  // Whether some channel has |alpha - 2| < 1/2 (may need the near-2 series).
  bool has_near2() const { return has_near2_; }
  // The coefficients of tile entry i (the fields the stage functions read).
  mo::RobustLossCoeffs at(int64_t i) const {
    mo::RobustLossCoeffs k{};
    const float* d = data_.data() + i;
    k.alpha = d[0];
    k.inv_scale = d[len_];
    k.b = d[2 * len_];
    k.inv_sqrt_b = d[3 * len_];
    k.sigma = d[4 * len_];
    k.bound = d[5 * len_];
    k.b_over_alpha = d[6 * len_];
    k.near2_e = d[7 * len_];
    k.kind = kind_[i];
    return k;
  }

 private:
  static constexpr int kFloatFields = 8;
  int64_t channels_, len_;
  std::vector<float> data_;
  std::vector<mo::int32> kind_;
  bool has_near2_ = false;
};

struct BlockTerms {
  alignas(64) float x[kBlock];
  alignas(64) float s[kBlock];
  alignas(64) float q[kBlock];
  alignas(64) float u[kBlock];
  alignas(64) float w[kBlock];
  alignas(64) float lw[kBlock];
  alignas(64) float L[kBlock];
  alignas(64) float y[kBlock];
  alignas(64) float ey[kBlock];
};

// x as float, s, q, u = q^2 (0 where q is huge: those elements take the
// scalar path), w, L = log1p(u), y = a L / 2 and exp(y) for m elements whose
// coefficients start at tile entry off.
template <typename T>
void FillBlockTerms(const T* x, int64_t m, const CoeffTile& tile, int64_t off, BlockTerms* b) {
  for (int64_t j = 0; j < m; ++j) b->x[j] = static_cast<float>(x[j]);
  for (int64_t j = 0; j < m; ++j) {
    const mo::RobustLossCoeffs k = tile.at(off + j);
    const float s = std::fabs(b->x[j]) * k.inv_scale;
    const float q = s * k.inv_sqrt_b;
    const float qs = q < MO_ROBUST_LOSS_BIG_Q ? q : 0.0f;
    b->s[j] = s;
    b->q[j] = q;
    b->u[j] = qs * qs;
    b->w[j] = 1.0f + qs * qs;
  }
  ArrayMap(b->lw, m) = ConstArrayMap(b->w, m).log();
  for (int64_t j = 0; j < m; ++j) {
    const mo::RobustLossCoeffs k = tile.at(off + j);
    b->L[j] = mo::rl_log1p_from(b->u[j], b->w[j], b->lw[j]);
    b->y[j] = 0.5f * k.alpha * b->L[j];
  }
  ArrayMap(b->ey, m) = ConstArrayMap(b->y, m).exp();
}

// rho over [begin, end) of the flat x.
template <typename T>
void ForwardBlocks(const T* xs, T* ys, int64_t begin, int64_t end, const CoeffTile& tile,
                   const std::vector<mo::RobustLossCoeffs>& coeffs) {
  BlockTerms b;
  alignas(64) float rho[kBlock];
  alignas(64) mo::int32 ok[kBlock];
  const int64_t channels = tile.channels();
  for (int64_t base = begin; base < end; base += kBlock) {
    const int64_t m = std::min(kBlock, end - base);
    const int64_t off = base % channels;
    FillBlockTerms(xs + base, m, tile, off, &b);
    mo::int32 num_bad = 0;
    for (int64_t j = 0; j < m; ++j) {
      const mo::RobustLossCoeffs k = tile.at(off + j);
      rho[j] = mo::rl_general_value(k, b.L[j], b.y[j], b.ey[j]);
      const mo::int32 good = mo::rl_general_value_ok(k, b.q[j], b.y[j]);
      ok[j] = good;
      num_bad += 1 - good;
    }
    for (int64_t j = 0; num_bad > 0 && j < m; ++j) {
      if (!ok[j]) rho[j] = mo::robust_loss_value_k(b.x[j], coeffs[(off + j) % channels]);
    }
    for (int64_t j = 0; j < m; ++j) ys[base + j] = static_cast<T>(rho[j]);
  }
}

// grad * drho/dx over [begin, end) of the flat x, and the sums of grad *
// drho/dalpha and grad * drho/dscale per channel, added to sum_alpha[c] and
// sum_scale[c] (c < channels) in a fixed order.
template <typename T>
void BackwardBlocks(const T* gs, const T* xs, T* dxs, int64_t begin, int64_t end, const CoeffTile& tile,
                    const std::vector<mo::RobustLossCoeffs>& coeffs, double* sum_alpha, double* sum_scale) {
  BlockTerms b;
  alignas(64) float g[kBlock];
  alignas(64) float dx[kBlock];
  alignas(64) float da[kBlock];
  alignas(64) float dc[kBlock];
  alignas(64) mo::int32 ok[kBlock];
  constexpr int kLanes = 16;
  const int64_t channels = tile.channels();
  for (int64_t base = begin; base < end; base += kBlock) {
    const int64_t m = std::min(kBlock, end - base);
    const int64_t off = base % channels;
    FillBlockTerms(xs + base, m, tile, off, &b);
    for (int64_t j = 0; j < m; ++j) g[j] = static_cast<float>(gs[base + j]);
    mo::int32 num_bad = 0;
    for (int64_t j = 0; j < m; ++j) {
      const mo::RobustLossCoeffs k = tile.at(off + j);
      const float u = b.u[j], w = b.w[j], L = b.L[j];
      const float r = u / w;
      const float D = mo::rl_d_from(u, L, r);
      float rho, d_x, d_a, d_c;
      mo::rl_general_grads(b.x[j], b.s[j], k, u, L, r, D, w, b.y[j], b.ey[j], false, rho, d_x, d_a, d_c);
      const mo::int32 good = mo::rl_general_grads_ok(k, b.q[j], b.y[j], L);
      ok[j] = good;
      num_bad += 1 - good;
      dx[j] = g[j] * d_x;
      da[j] = good ? g[j] * d_a : 0.0f;
      dc[j] = good ? g[j] * d_c : 0.0f;
    }
    if (tile.has_near2()) {  // alpha near 2, u < 1/4: d rho/d alpha from the series
      for (int64_t j = 0; j < m; ++j) {
        const mo::RobustLossCoeffs k = tile.at(off + j);
        const float u = b.u[j];
        const float series = mo::rl_dalpha_series(k, u);
        da[j] = ok[j] && mo::rl_near2_series(k, u / b.w[j]) ? g[j] * series : da[j];
      }
    }
    for (int64_t j = 0; num_bad > 0 && j < m; ++j) {
      if (ok[j]) continue;
      float rho, d_x, d_a, d_c;
      mo::robust_loss_grads_k(b.x[j], coeffs[(off + j) % channels], rho, d_x, d_a, d_c);
      dx[j] = g[j] * d_x;
      da[j] = g[j] * d_a;
      dc[j] = g[j] * d_c;
    }
    for (int64_t j = 0; j < m; ++j) dxs[base + j] = static_cast<T>(dx[j]);
    if (channels == 1) {
      // kLanes float partial sums in a fixed order (vectorises), then double.
      float lane_a[kLanes] = {}, lane_c[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= m; j += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          lane_a[l] += da[j + l];
          lane_c[l] += dc[j + l];
        }
      }
      for (int l = 0; j < m; ++j, ++l) {
        lane_a[l] += da[j];
        lane_c[l] += dc[j];
      }
      for (int l = 0; l < kLanes; ++l) {
        sum_alpha[0] += lane_a[l];
        sum_scale[0] += lane_c[l];
      }
    } else {
      int64_t col = off;
      for (int64_t j = 0; j < m; ++j) {
        sum_alpha[col] += da[j];
        sum_scale[col] += dc[j];
        if (++col == channels) col = 0;
      }
    }
  }
}

// ---- The kernels' bodies ---------------------------------------------------------------
// parallel_for(units, cycles_per_unit, fn) runs fn(begin, end) over [0, units)
// (the kernel: TF's intra-op pool). Element i of x is in channel
// i % coeffs.size() (one entry: scalar alpha and scale).

// rho of xs[0, n) into ys.
template <typename T, typename ParallelFor>
void Forward(const std::vector<mo::RobustLossCoeffs>& coeffs, const T* xs, T* ys, int64_t n,
             const ParallelFor& parallel_for) {
  // Scalar alpha = 2 or +-inf: closed forms, no block path needed.
  const bool closed_form = coeffs.size() == 1 && coeffs[0].kind != 0;
  const CoeffTile tile(closed_form ? std::vector<mo::RobustLossCoeffs>{} : coeffs);
  auto work = [&](int64_t begin, int64_t end) {
    if (closed_form) {
      const mo::RobustLossCoeffs k = coeffs[0];
      for (int64_t i = begin; i < end; ++i) {
        ys[i] = static_cast<T>(mo::robust_loss_value_k(static_cast<float>(xs[i]), k));
      }
      return;
    }
    ForwardBlocks(xs, ys, begin, end, tile, coeffs);
  };
  parallel_for(n, /*cycles_per_item=*/20, work);
}

// grad * drho/dx into dxs[0, n), and per channel c the sums of grad *
// drho/dalpha and grad * drho/dscale into sum_a[c] and sum_c[c].
template <typename T, typename ParallelFor>
void Backward(const std::vector<mo::RobustLossCoeffs>& coeffs, const T* gs, const T* xs, T* dxs, int64_t n,
              double* sum_a, double* sum_c, const ParallelFor& parallel_for) {
  const int64_t channels = static_cast<int64_t>(coeffs.size());
  const bool closed_form = channels == 1 && coeffs[0].kind != 0;
  const CoeffTile tile(closed_form ? std::vector<mo::RobustLossCoeffs>{} : coeffs);
  // Fixed blocks (their number depends on n only) with their own per-channel
  // partial sums (double), summed in block order afterwards: deterministic
  // for any number of threads, and free of atomics.
  const int64_t num_blocks = std::max<int64_t>(1, std::min<int64_t>(64, n / 16384));
  std::vector<double> partial(num_blocks * 2 * channels, 0.0);
  auto work = [&](int64_t block_begin, int64_t block_end) {
    for (int64_t blk = block_begin; blk < block_end; ++blk) {
      const int64_t begin = n * blk / num_blocks, end = n * (blk + 1) / num_blocks;
      double* pa = partial.data() + blk * 2 * channels;
      double* ps = pa + channels;
      if (!closed_form) {
        BackwardBlocks(gs, xs, dxs, begin, end, tile, coeffs, pa, ps);
        continue;
      }
      const mo::RobustLossCoeffs k = coeffs[0];
      for (int64_t i = begin; i < end; ++i) {
        float rho, d_x, d_a, d_c;
        mo::robust_loss_grads_k(static_cast<float>(xs[i]), k, rho, d_x, d_a, d_c);
        const float g = static_cast<float>(gs[i]);
        dxs[i] = static_cast<T>(g * d_x);
        pa[0] += static_cast<double>(g) * d_a;
        ps[0] += static_cast<double>(g) * d_c;
      }
    }
  };
  parallel_for(num_blocks, /*cycles_per_item=*/40 * (n / num_blocks + 1), work);
  for (int64_t col = 0; col < channels; ++col) sum_a[col] = sum_c[col] = 0.0;
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    for (int64_t col = 0; col < channels; ++col) {
      sum_a[col] += partial[blk * 2 * channels + col];
      sum_c[col] += partial[blk * 2 * channels + channels + col];
    }
  }
}

}  // namespace robust_loss_cpu
}  // namespace mo
#endif  // MO_CPU_BODIES

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels of MetalOpsRobustLoss / MetalOpsRobustLossGrad, once
// for every C++-API device (one kernel class templated on the device and the
// dtype, a functor per device, TF's pattern): the checks above and the output
// allocation here; RobustLossFunctor<Device, T> does the work.
// robust_loss_cpu.cc (the CPU functor) and robust_loss_cuda.cc (the CUDA one)
// define MO_TF_KERNEL and include TensorFlow's op_kernel.h and
// kernels/spec/checks_tf.h before this header, which itself reaches no
// TensorFlow header.
namespace mo {

// The inputs of one call: x (and grad) of n elements of T; alpha and scale
// float, one element or one per channel as `layout` says.
template <typename T>
struct RobustLossArgs {
  int64_t n;
  robust_loss::ParamLayout layout;
  const T* x;
  const float* alpha;
  const float* scale;
};

// Defined per device. The outputs may share their buffer with x (forward) or
// grad (backward): element i is read before it is written.
template <typename Device, typename T>
struct RobustLossFunctor {
  // The checks of alpha's and scale's values where the device reads them (they
  // live in the device's memory).
  static absl::Status CheckParamValues(const RobustLossArgs<T>& args);
  // out[i] = rho(x[i]); n > 0.
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, T* out);
  // dx[i] = grad[i] * drho/dx; dalpha / dscale (as many elements as alpha /
  // scale) get the sums of grad * drho/dalpha and grad * drho/dscale, zeros
  // when n = 0.
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, const T* grad,
                               T* dx, float* dalpha, float* dscale);
};

namespace robust_loss {

// x, alpha and scale (inputs `first` to first + 2): the shapes of alpha and
// scale against x and, where the device reads them, their values.
template <typename Device, typename T>
absl::Status CheckedArgs(::tensorflow::OpKernelContext* ctx, int first, RobustLossArgs<T>* args) {
  const ::tensorflow::Tensor& x = ctx->input(first);
  const ::tensorflow::Tensor& alpha = ctx->input(first + 1);
  const ::tensorflow::Tensor& scale = ctx->input(first + 2);
  TF_RETURN_IF_ERROR(checks::ToStatus(
      robust_loss::ParamShapes(checks::DimsOf(x), checks::DimsOf(alpha), checks::DimsOf(scale), &args->layout)));
  args->n = x.NumElements();
  args->x = x.flat<T>().data();
  args->alpha = alpha.flat<float>().data();
  args->scale = scale.flat<float>().data();
  return RobustLossFunctor<Device, T>::CheckParamValues(*args);
}

}  // namespace robust_loss

template <typename Device, typename T>
class RobustLossOp : public ::tensorflow::OpKernel {
 public:
  explicit RobustLossOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    RobustLossArgs<T> args;
    OP_REQUIRES_OK(ctx, robust_loss::CheckedArgs<Device, T>(ctx, 0, &args));
    ::tensorflow::Tensor* out = nullptr;
    // The loss may take x's buffer (elementwise) when nothing else needs x.
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, ctx->input(0).shape(), &out));
    if (args.n == 0) return;
    OP_REQUIRES_OK(ctx, (RobustLossFunctor<Device, T>::Forward(ctx, args, out->flat<T>().data())));
  }
};

template <typename Device, typename T>
class RobustLossGradOp : public ::tensorflow::OpKernel {
 public:
  explicit RobustLossGradOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& grad = ctx->input(0);
    const ::tensorflow::Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss::GradShape(checks::DimsOf(grad), checks::DimsOf(x))));
    RobustLossArgs<T> args;
    OP_REQUIRES_OK(ctx, robust_loss::CheckedArgs<Device, T>(ctx, 1, &args));
    ::tensorflow::Tensor *dx = nullptr, *dalpha = nullptr, *dscale = nullptr;
    // grad_x may take grad's buffer (elementwise; TF forwards only when no one
    // else holds grad): no fresh allocation to fault in.
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ctx->input(2).shape(), &dalpha));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, ctx->input(3).shape(), &dscale));
    OP_REQUIRES_OK(ctx, (RobustLossFunctor<Device, T>::Backward(ctx, args, grad.flat<T>().data(), dx->flat<T>().data(),
                                                                dalpha->flat<float>().data(),
                                                                dscale->flat<float>().data())));
  }
};

}  // namespace mo
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_H_
