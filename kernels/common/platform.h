// Portability layer shared by every backend.
//
// Headers in kernels/common/ hold the arithmetic of each op once. They are
// compiled as plain C++ (CPU kernels, the MSL shim tests), as CUDA
// (__host__ __device__) and as Metal Shading Language (the .metal shaders
// #include them). This file gives them one vocabulary for all three.
#ifndef MO_KERNELS_COMMON_PLATFORM_H_
#define MO_KERNELS_COMMON_PLATFORM_H_

#if defined(__METAL_VERSION__) || defined(MO_MSL_SHIM)
// ---- Metal Shading Language -------------------------------------------------
// MO_MSL_SHIM: the MSL shim (tests/metal_shim/msl_shim.h) compiles this same
// branch as C++, so the CPU tests run the arithmetic the GPU runs.
#if defined(__METAL_VERSION__)
#include <metal_stdlib>
#endif
#define MO_FN inline
#define MO_THREAD thread
#define MO_DEVICE device
#define MO_CONSTANT constant
#if defined(MO_MSL_SHIM)
// The shim hands threadgroup memory to a kernel itself.
#define MO_THREADGROUP_ARG(i)
#else
// A kernel argument bound to threadgroup memory at index i.
#define MO_THREADGROUP_ARG(i) [[threadgroup(i)]]
#endif
namespace mo {
typedef int int32;
typedef uint uint32;
typedef long int64;
typedef ulong uint64;
MO_FN float floor_f(float x) { return metal::floor(x); }
MO_FN float ceil_f(float x) { return metal::ceil(x); }
MO_FN float exp_f(float x) { return metal::exp(x); }
// Metal compiles with fast math by default: these are exp_f and 1 / x (see the C++ branch).
MO_FN float fast_exp_f(float x) { return metal::exp(x); }
MO_FN float fast_rcp_f(float x) { return 1.0f / x; }
MO_FN float exp2_f(float x) { return metal::exp2(x); }
MO_FN float log_f(float x) { return metal::log(x); }
MO_FN float log2_f(float x) { return metal::log2(x); }
MO_FN float sqrt_f(float x) { return metal::sqrt(x); }
MO_FN float pow_f(float x, float y) { return metal::pow(x, y); }
MO_FN float fabs_f(float x) { return metal::fabs(x); }
MO_FN float fma_f(float a, float b, float c) { return metal::fma(a, b, c); }
MO_FN float fmin_f(float a, float b) { return metal::fmin(a, b); }
MO_FN float fmax_f(float a, float b) { return metal::fmax(a, b); }
MO_FN bool isnan_f(float x) { return metal::isnan(x); }
MO_FN bool isinf_f(float x) { return metal::isinf(x); }
}  // namespace mo

#else
// ---- C++ and CUDA -------------------------------------------------------------
#include <cmath>
#include <cstdint>
#if defined(__CUDACC__)
#define MO_FN __host__ __device__ __forceinline__
#else
#define MO_FN inline
#endif
#define MO_THREAD
#define MO_DEVICE
// Kernel arguments in Metal's constant address space are read-only.
#define MO_CONSTANT const
// The MSL shim hands threadgroup memory to a kernel itself (and its empty
// `threadgroup` macro would turn [[threadgroup(i)]] into invalid [[(i)]]).
#define MO_THREADGROUP_ARG(i)
namespace mo {
typedef int32_t int32;
typedef uint32_t uint32;
typedef int64_t int64;
typedef uint64_t uint64;
MO_FN float floor_f(float x) { return floorf(x); }
MO_FN float ceil_f(float x) { return ceilf(x); }
MO_FN float exp_f(float x) { return expf(x); }
// exp and 1 / x for a kernel's innermost loop: on a CUDA device the hardware's
// approximations (ex2.approx and a fast divide, a couple of ulps; what gsplat's
// --use_fast_math build runs), elsewhere the exact ones.
MO_FN float fast_exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return expf(x);
#endif
}
MO_FN float fast_rcp_f(float x) {
#if defined(__CUDA_ARCH__)
  return __fdividef(1.0f, x);
#else
  return 1.0f / x;
#endif
}
MO_FN float exp2_f(float x) { return exp2f(x); }
MO_FN float log_f(float x) { return logf(x); }
MO_FN float log2_f(float x) { return log2f(x); }
MO_FN float sqrt_f(float x) { return sqrtf(x); }
MO_FN float pow_f(float x, float y) { return powf(x, y); }
MO_FN float fabs_f(float x) { return fabsf(x); }
MO_FN float fma_f(float a, float b, float c) { return fmaf(a, b, c); }
MO_FN float fmin_f(float a, float b) { return fminf(a, b); }
MO_FN float fmax_f(float a, float b) { return fmaxf(a, b); }
MO_FN bool isnan_f(float x) { return x != x; }
MO_FN bool isinf_f(float x) { return fabsf(x) == INFINITY; }
}  // namespace mo
#endif

namespace mo {

// ---- expm1 and log1p ------------------------------------------------------------
// MSL has no expm1 or log1p, and exp(x) - 1 and log(1 + x) lose every digit
// for small x. The Metal branch below computes both to a few ulp over the whole
// float range (tests/test_metal_math_shim.py states and checks the bound
// against NumPy's float64 results). expm1 calls no exp at all, and log1p calls
// log only where |log(1 + x)| >= ln(2)/2, so neither needs MSL's exp and log
// (not correctly rounded) to be better than a few ulp. C++ and CUDA use their
// libraries' expm1f / log1pf; the two pieces of log1p are shared with
// robust_loss.h's vectorisable log1p.

// log1p(x) for 1 + x in [sqrt(1/2), sqrt(2)]: 2 atanh(s), s = x / (2 + x),
// by its series to s^11 (|s| <= 0.172: the first term left out is below
// 1e-10 relative).
MO_FN float log1p_series_f(float x) {
  const float s = x / (2.0f + x);
  const float z = s * s;
  float q = 1.0f / 11.0f;
  q = fma_f(q, z, 1.0f / 9.0f);
  q = fma_f(q, z, 1.0f / 7.0f);
  q = fma_f(q, z, 1.0f / 5.0f);
  q = fma_f(q, z, 1.0f / 3.0f);
  const float s2 = 2.0f * s;
  return fma_f(s2 * z, q, s2);
}

// log1p(x) from u = 1 + x rounded and log_u = log(u): the rounding error of u,
// (u - 1) - x (exact), corrects log(u) to first order (Goldberg). Accurate to
// log's own relative error where |log(u)| is not small (u outside
// [sqrt(1/2), sqrt(2)]).
MO_FN float log1p_from_log_f(float x, float u, float log_u) { return log_u - ((u - 1.0f) - x) / u; }

// Where log1p_series_f applies.
MO_FN bool log1p_series_range(float x) { return x >= -0.29289322f && x <= 0.41421356f; }

#if defined(__METAL_VERSION__) || defined(MO_MSL_SHIM)
// expm1(x) = 2^k (expm1(r) + 1) - 1 with x = k ln2 + r, |r| <= ln2/2 (ln2 split
// in two, Cody and Waite: k * kLn2Hi is exact for |k| < 512), expm1(r) by its
// Taylor polynomial to r^8 (the first term left out is below 1e-9 relative).
MO_FN float expm1_f(float x) {
  if (isnan_f(x)) return x;
  if (x > 89.0f) return INFINITY;                 // above log(FLT_MAX) = 88.72
  if (x < -104.0f) return -1.0f;                  // e^x is below FLT_MIN * 2^-23
  if (fabs_f(x) < 1.4901161e-08f) return x;       // |x| < 2^-26: x is expm1(x) rounded
  const float kLn2Hi = 0.693145751953125f;        // 15 significant bits
  const float kLn2Lo = 1.42860676533018704e-06f;  // ln2 - kLn2Hi
  const float k = floor_f(fma_f(x, 1.44269504088896341f, 0.5f));
  float r = fma_f(-k, kLn2Hi, x);
  r = fma_f(-k, kLn2Lo, r);
  float q = 1.0f / 40320.0f;
  q = fma_f(q, r, 1.0f / 5040.0f);
  q = fma_f(q, r, 1.0f / 720.0f);
  q = fma_f(q, r, 1.0f / 120.0f);
  q = fma_f(q, r, 1.0f / 24.0f);
  q = fma_f(q, r, 1.0f / 6.0f);
  q = fma_f(q, r, 0.5f);
  const float p = fma_f(r * r, q, r);             // expm1(r)
  const int ki = int(k);
  if (ki == 0) return p;
  if (ki > 24) return metal::ldexp(p + 1.0f, ki);  // 2^k - 1 rounds to 2^k
  const float t = metal::ldexp(1.0f, ki);          // t - 1 is exact for -24 <= k <= 24 (and -1 below)
  return fma_f(t, p, t - 1.0f);
}

MO_FN float log1p_f(float x) {
  if (isnan_f(x) || x == INFINITY) return x;
  if (x <= -1.0f) return x == -1.0f ? -INFINITY : NAN;
  if (fabs_f(x) < 5.9604645e-08f) return x;       // |x| < 2^-24: x is log1p(x) rounded
  if (log1p_series_range(x)) return log1p_series_f(x);
  const float u = 1.0f + x;
  return log1p_from_log_f(x, u, log_f(u));
}
#else
MO_FN float log1p_f(float x) { return log1pf(x); }
MO_FN float expm1_f(float x) { return expm1f(x); }
#endif

}  // namespace mo

#endif  // MO_KERNELS_COMMON_PLATFORM_H_
