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
// alpha). For |alpha - 2| < 1/2 and u >= 1 the alpha-derivative uses the form
// (b P / 2a)(L - (2+a)/a) + sigma (exp(t)/2 - 2/a^2), P = e^y, whose terms do
// not cancel as alpha -> 2. Large exponents go through logs, and rho saturates
// at exp(MO_ROBUST_LOSS_MAX_LOG) ~ 9.25e29 with zero gradients (every branch,
// alpha = 2 included), the role of the reference's expm1_safe clamp: values
// and gradients stay finite. Invalid parameters (c <= 0 or NaN, alpha NaN) give
// NaN for the element and its gradients; the CPU kernel and the Python wrapper
// raise InvalidArgument before that can happen.
#ifndef METAL_OPS_KERNELS_COMMON_ROBUST_LOSS_H_
#define METAL_OPS_KERNELS_COMMON_ROBUST_LOSS_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
// alpha and scale are float32 tensors of one element (broadcast to all of x)
// or of `channels` elements (broadcast along the last axis of x).
struct RobustLossParams {
  int64 num_elements;  // elements of x
  int64 channels;      // last dimension of x when a parameter is per-channel, else 1
  int64 alpha_vec;     // 1 when alpha has `channels` elements, 0 when it is a scalar
  int64 scale_vec;     // same for scale
};

#define MO_ROBUST_LOSS_MAX_EXP 43.0f  // above this exponent, work with logs
#define MO_ROBUST_LOSS_MAX_LOG 69.0f  // rho saturates at exp(69) ~ 9.25e29 (gradients 0)
#define MO_ROBUST_LOSS_BIG_Q 1.0e15f  // s/sqrt(b) above this: log1p(u) = 2 log(s/sqrt(b))

// log1p for u >= 0, accurate on every backend (MSL has no log1p, and a plain
// log(1 + u) loses all digits for small u).
MO_FN float rl_log1p(float u) {
  if (u < 0.1f) {
    return u * (1.0f - u * (0.5f - u * (1.0f / 3.0f - u * (0.25f - u * (0.2f - u * (1.0f / 6.0f -
                u * (1.0f / 7.0f - u * 0.125f)))))));
  }
  const float w = 1.0f + u;
  return log_f(w) * (u / (w - 1.0f));  // Goldberg's correction for the rounding of 1 + u
}

// E1(y) = expm1(y) / y, with E1(0) = 1.
MO_FN float rl_e1(float y) {
  if (fabs_f(y) < 0.5f) {
    return 1.0f + y * (0.5f + y * (1.0f / 6.0f + y * (1.0f / 24.0f + y * (1.0f / 120.0f +
           y * (1.0f / 720.0f + y * (1.0f / 5040.0f + y * (1.0f / 40320.0f)))))));
  }
  return (exp_f(y) - 1.0f) / y;
}

// expm1 on every backend.
MO_FN float rl_expm1(float y) {
  if (fabs_f(y) < 0.5f) return y * rl_e1(y);
  return exp_f(y) - 1.0f;
}

// E1'(y) = (y e^y - expm1(y)) / y^2, with E1'(0) = 1/2.
MO_FN float rl_e1_prime(float y) {
  if (fabs_f(y) < 0.5f) {
    return 0.5f + y * (1.0f / 3.0f + y * (0.125f + y * (1.0f / 30.0f + y * (1.0f / 144.0f +
           y * (1.0f / 840.0f + y * (1.0f / 5760.0f + y * (1.0f / 45360.0f)))))));
  }
  return (exp_f(y) * (y - 1.0f) + 1.0f) / (y * y);
}

// L = log1p(u), r = u/(1+u), D = L - r for u = (s/sqrt(b))^2, without overflow.
MO_FN void rl_log_terms(float s, float b, MO_THREAD float& L, MO_THREAD float& r,
                        MO_THREAD float& D) {
  const float q = s / sqrt_f(b);
  if (q >= MO_ROBUST_LOSS_BIG_Q) {  // u >= 1e30: log1p(u) = log(u) to float precision
    L = 2.0f * log_f(q);
    r = 1.0f;
    D = L - 1.0f;
    return;
  }
  const float u = q * q;
  L = rl_log1p(u);
  r = u / (1.0f + u);
  if (u < 0.1f) {  // D = sum_{n>=2} (-1)^n (n-1)/n u^n
    D = u * u * (0.5f - u * (2.0f / 3.0f - u * (0.75f - u * (0.8f - u * (5.0f / 6.0f -
        u * (6.0f / 7.0f - u * 0.875f))))));
  } else {
    D = L - r;
  }
}

MO_FN bool robust_loss_params_valid(float alpha, float scale) {
  return scale > 0.0f && !isnan_f(alpha) && !isinf_f(scale);
}

// rho(x, alpha, scale).
MO_FN float robust_loss_value(float x, float alpha, float scale) {
  if (!robust_loss_params_valid(alpha, scale)) return NAN;
  const float s = fabs_f(x) / scale;
  const float sat = exp_f(MO_ROBUST_LOSS_MAX_LOG);
  if (alpha == 2.0f) {
    const float h = 0.5f * s * s;
    return h > sat ? sat : h;
  }
  if (isinf_f(alpha)) {
    const float h = 0.5f * s * s;
    if (alpha < 0.0f) return -rl_expm1(-h);
    return h > MO_ROBUST_LOSS_MAX_LOG ? sat : rl_expm1(h);
  }
  const float b = fabs_f(alpha - 2.0f);
  float L, r, D;
  rl_log_terms(s, b, L, r, D);
  const float y = 0.5f * alpha * L;
  if (y > MO_ROBUST_LOSS_MAX_EXP) {  // alpha > 0.45 here: rho = (b/a) e^y - b/a via logs
    const float log_rho = y + log_f(b / alpha);
    return log_rho > MO_ROBUST_LOSS_MAX_LOG ? sat : exp_f(log_rho) - b / alpha;
  }
  return 0.5f * b * L * rl_e1(y);
}

// rho and its three partial derivatives at one element.
MO_FN void robust_loss_grads(float x, float alpha, float scale, MO_THREAD float& rho,
                             MO_THREAD float& d_x, MO_THREAD float& d_alpha,
                             MO_THREAD float& d_scale) {
  if (!robust_loss_params_valid(alpha, scale) || isnan_f(x)) {
    rho = NAN;
    d_x = NAN;
    d_alpha = NAN;
    d_scale = NAN;
    return;
  }
  const float s = fabs_f(x) / scale;
  const float sign = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  float t = 0.0f;  // log of (1 + u)^(alpha/2 - 1): drho/ds = s exp(t)
  bool saturated = false;
  const float sat = exp_f(MO_ROBUST_LOSS_MAX_LOG);
  d_alpha = 0.0f;
  if (alpha == 2.0f) {
    rho = 0.5f * s * s;
    saturated = rho > sat;
  } else if (isinf_f(alpha)) {
    const float h = 0.5f * s * s;
    if (alpha < 0.0f) {
      rho = -rl_expm1(-h);
      t = -h;
    } else if (h > MO_ROBUST_LOSS_MAX_LOG) {
      saturated = true;
    } else {
      rho = rl_expm1(h);
      t = h;
    }
  } else {
    const float b = fabs_f(alpha - 2.0f);
    const float sigma = alpha > 2.0f ? 1.0f : -1.0f;
    float L, r, D;
    rl_log_terms(s, b, L, r, D);
    const float y = 0.5f * alpha * L;
    t = (0.5f * alpha - 1.0f) * L;
    if (y > MO_ROBUST_LOSS_MAX_EXP || (b < 0.5f && r >= 0.5f)) {
      // Form without cancellation near alpha = 2 (alpha >= 0.45 here):
      // drho/da = (b P / 2a) (L - (2+a)/a) + sigma (exp(t)/2 - 2/a^2), P = e^y.
      const float log_bp = y + log_f(b / alpha);
      if (log_bp > MO_ROBUST_LOSS_MAX_LOG) {
        saturated = true;
      } else {
        rho = y > MO_ROBUST_LOSS_MAX_EXP ? exp_f(log_bp) - b / alpha : 0.5f * b * L * rl_e1(y);
        d_alpha = 0.5f * exp_f(log_bp) * (L - (2.0f + alpha) / alpha) +
                  sigma * (0.5f * exp_f(t) - 2.0f / (alpha * alpha));
      }
    } else {
      // Form without division by alpha (exact at alpha = 0 and at x = 0).
      const float e1 = rl_e1(y);
      rho = 0.5f * b * L * e1;
      d_alpha = 0.5f * sigma * e1 * D + 0.25f * L * rl_e1_prime(y) * (b * L - sigma * alpha * r);
    }
  }
  if (saturated) {
    rho = sat;
    d_x = 0.0f;
    d_alpha = 0.0f;
    d_scale = 0.0f;
    return;
  }
  if (t < -80.0f) {  // s exp(t) would underflow before the product: go through logs
    const float ls = log_f(s);
    d_x = sign * exp_f(t + ls) / scale;
    d_scale = -exp_f(t + 2.0f * ls) / scale;
  } else {
    const float se = s * exp_f(t);
    d_x = sign * se / scale;
    d_scale = -(s * se) / scale;
  }
}

// Index of the alpha / scale element used by flat element i of x.
MO_FN int64 robust_loss_param_index(int64 i, int64 channels, int64 is_vec) {
  return is_vec != 0 ? i % channels : 0;
}

}  // namespace mo

#endif  // METAL_OPS_KERNELS_COMMON_ROBUST_LOSS_H_
