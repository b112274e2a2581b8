// Barron's general and adaptive robust loss (CVPR 2019), written once for the
// CPU kernels, CUDA and Metal (see platform.h).
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

// The shaders' buffer indices (robust_loss.metal, kernels/robust_loss/robust_loss_plan.cc).
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

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_H_
