// A small SIMD vocabulary for CPU kernels: one float vector type per target
// (AVX-512, AVX2+FMA, NEON, or a one-lane scalar fallback) with the loads,
// stores, fused multiply-add, selects and exp a register-tiled kernel needs.
// Chosen at compile time from the target macros, so one kernel source builds
// for the x86 Linux wheel (-march=native) and for arm64 macOS.
#ifndef MO_KERNELS_CPU_SIMD_H_
#define MO_KERNELS_CPU_SIMD_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include "kernels/framework/x86_intrinsics.h"
#define MO_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include "kernels/framework/x86_intrinsics.h"
#define MO_SIMD_AVX2 1
#elif defined(__ARM_NEON) || defined(__ARM_NEON__)
#include <arm_neon.h>
#define MO_SIMD_NEON 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MO_INLINE inline __attribute__((always_inline))
#else
#define MO_INLINE inline
#endif

namespace mo {
namespace simd {

#if MO_SIMD_AVX512 || MO_SIMD_AVX2
// The two x86 ISAs' float intrinsics differ by their prefix only.
#if MO_SIMD_AVX512
#define MO_SIMD_PS(op) _mm512_##op##_ps
using V = __m512;
constexpr const char* kIsa = "avx512";
constexpr int kRegisters = 32;
#else
#define MO_SIMD_PS(op) _mm256_##op##_ps
using V = __m256;
constexpr const char* kIsa = "avx2";
constexpr int kRegisters = 16;
#endif
constexpr int kLanes = sizeof(V) / sizeof(float);
MO_INLINE V Zero() { return MO_SIMD_PS(setzero)(); }
MO_INLINE V Set(float a) { return MO_SIMD_PS(set1)(a); }
MO_INLINE V Load(const float* p) { return MO_SIMD_PS(loadu)(p); }
MO_INLINE void Store(float* p, V v) { MO_SIMD_PS(storeu)(p, v); }
MO_INLINE V Fma(V a, V b, V c) { return MO_SIMD_PS(fmadd)(a, b, c); }
MO_INLINE V Add(V a, V b) { return MO_SIMD_PS(add)(a, b); }
MO_INLINE V Sub(V a, V b) { return MO_SIMD_PS(sub)(a, b); }
MO_INLINE V Mul(V a, V b) { return MO_SIMD_PS(mul)(a, b); }
MO_INLINE V Div(V a, V b) { return MO_SIMD_PS(div)(a, b); }
// Max and Min return b where either is NaN (x86's rule; NEON's and the scalar
// form's give NaN too): Max(limit, x) keeps a NaN x.
MO_INLINE V Max(V a, V b) { return MO_SIMD_PS(max)(a, b); }
MO_INLINE V Min(V a, V b) { return MO_SIMD_PS(min)(a, b); }
#undef MO_SIMD_PS
#endif

#if MO_SIMD_AVX512
MO_INLINE V LoadN(const float* p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p); }
MO_INLINE void StoreN(float* p, V v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v); }
// where(a > 0, b, c)
MO_INLINE V SelectPositive(V a, V b, V c) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_GT_OQ), c, b);
}
MO_INLINE V RoundToInt(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// a * 2^n for integral n in [-126, 127].
MO_INLINE V Ldexp(V a, V n) { return _mm512_scalef_ps(a, n); }
// Every lane in [low, high] (NaN never is).
MO_INLINE bool AllWithin(V v, V low, V high) {
  return (_mm512_cmp_ps_mask(v, low, _CMP_GE_OQ) & _mm512_cmp_ps_mask(v, high, _CMP_LE_OQ)) == 0xFFFF;
}
#elif MO_SIMD_AVX2
MO_INLINE __m256i MaskOf(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
MO_INLINE V LoadN(const float* p, int n) { return _mm256_maskload_ps(p, MaskOf(n)); }
MO_INLINE void StoreN(float* p, V v, int n) { _mm256_maskstore_ps(p, MaskOf(n), v); }
MO_INLINE V SelectPositive(V a, V b, V c) {
  return _mm256_blendv_ps(c, b, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GT_OQ));
}
MO_INLINE V RoundToInt(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
MO_INLINE V Ldexp(V a, V n) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(a, _mm256_castsi256_ps(e));
}
MO_INLINE bool AllWithin(V v, V low, V high) {
  return _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(v, low, _CMP_GE_OQ), _mm256_cmp_ps(v, high, _CMP_LE_OQ))) ==
         0xFF;
}
#elif MO_SIMD_NEON
constexpr const char* kIsa = "neon";
constexpr int kLanes = 4;
constexpr int kRegisters = 32;
using V = float32x4_t;
MO_INLINE V Zero() { return vdupq_n_f32(0.0f); }
MO_INLINE V Set(float a) { return vdupq_n_f32(a); }
MO_INLINE V Load(const float* p) { return vld1q_f32(p); }
MO_INLINE void Store(float* p, V v) { vst1q_f32(p, v); }
MO_INLINE V LoadN(const float* p, int n) {
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::memcpy(t, p, sizeof(float) * n);
  return vld1q_f32(t);
}
MO_INLINE void StoreN(float* p, V v, int n) {
  float t[4];
  vst1q_f32(t, v);
  std::memcpy(p, t, sizeof(float) * n);
}
MO_INLINE V Fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
MO_INLINE V Add(V a, V b) { return vaddq_f32(a, b); }
MO_INLINE V Sub(V a, V b) { return vsubq_f32(a, b); }
MO_INLINE V Mul(V a, V b) { return vmulq_f32(a, b); }
MO_INLINE V Div(V a, V b) { return vdivq_f32(a, b); }
MO_INLINE V Max(V a, V b) { return vmaxq_f32(a, b); }
MO_INLINE V Min(V a, V b) { return vminq_f32(a, b); }
MO_INLINE V SelectPositive(V a, V b, V c) { return vbslq_f32(vcgtq_f32(a, vdupq_n_f32(0.0f)), b, c); }
MO_INLINE V RoundToInt(V a) { return vrndnq_f32(a); }
MO_INLINE V Ldexp(V a, V n) {
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(a, vreinterpretq_f32_s32(e));
}
MO_INLINE bool AllWithin(V v, V low, V high) {
  return vminvq_u32(vandq_u32(vcgeq_f32(v, low), vcleq_f32(v, high))) != 0;
}
#else
constexpr const char* kIsa = "scalar";
constexpr int kLanes = 1;
constexpr int kRegisters = 16;
using V = float;
MO_INLINE V Zero() { return 0.0f; }
MO_INLINE V Set(float a) { return a; }
MO_INLINE V Load(const float* p) { return *p; }
MO_INLINE void Store(float* p, V v) { *p = v; }
MO_INLINE V LoadN(const float* p, int n) { return n > 0 ? *p : 0.0f; }
MO_INLINE void StoreN(float* p, V v, int n) {
  if (n > 0) *p = v;
}
MO_INLINE V Fma(V a, V b, V c) { return std::fma(a, b, c); }
MO_INLINE V Add(V a, V b) { return a + b; }
MO_INLINE V Sub(V a, V b) { return a - b; }
MO_INLINE V Mul(V a, V b) { return a * b; }
MO_INLINE V Div(V a, V b) { return a / b; }
MO_INLINE V Max(V a, V b) { return a > b ? a : b; }  // b where either is NaN, as x86's
MO_INLINE V Min(V a, V b) { return a < b ? a : b; }
MO_INLINE V SelectPositive(V a, V b, V c) { return a > 0.0f ? b : c; }
MO_INLINE V RoundToInt(V a) { return std::nearbyint(a); }
// n is NaN only where Exp's x was, and then so is a: NaN out, without the
// undefined conversion of NaN to int.
MO_INLINE V Ldexp(V a, V n) { return n == n ? std::ldexp(a, static_cast<int>(n)) : a + n; }
MO_INLINE bool AllWithin(V v, V low, V high) { return v >= low && v <= high; }
#endif

// Exp's range: the normal floats' exponents.
constexpr float kExpLow = -87.33654f;
constexpr float kExpHigh = 88.72283f;

// e^x, within 2 ulp of expf for x in [kExpLow, kExpHigh]; x is clamped to that
// range (e^x below it gives ~1e-38 instead of 0, above it 3.4e38 instead of
// inf); e^NaN is NaN. Cody-Waite range reduction and Cephes' degree-5 polynomial.
MO_INLINE V Exp(V x) {
  x = Min(Set(kExpHigh), Max(Set(kExpLow), x));  // limits first: a NaN x stays NaN
  const V n = RoundToInt(Mul(x, Set(1.44269504088896341f)));
  V r = Fma(n, Set(-0.693359375f), x);
  r = Fma(n, Set(2.12194440e-4f), r);
  V p = Set(1.9875691500e-4f);
  p = Fma(p, r, Set(1.3981999507e-3f));
  p = Fma(p, r, Set(8.3334519073e-3f));
  p = Fma(p, r, Set(4.1665795894e-2f));
  p = Fma(p, r, Set(1.6666665459e-1f));
  p = Fma(p, r, Set(5.0000001201e-1f));
  p = Fma(Mul(p, r), r, Add(r, Set(1.0f)));
  // n is in [-126, 128]: scale in two steps so that 2^128 does not overflow the exponent field.
  const V half = RoundToInt(Mul(n, Set(0.5f)));
  return Ldexp(Ldexp(p, half), Sub(n, half));
}

// f applied to every lane (for activations without a vector formula here).
template <typename F>
MO_INLINE V MapLanes(V v, F f) {
  float t[kLanes];
  std::memcpy(t, &v, sizeof(t));
  for (int i = 0; i < kLanes; ++i) t[i] = f(t[i]);
  V out;
  std::memcpy(&out, t, sizeof(t));
  return out;
}

}  // namespace simd
}  // namespace mo

#endif  // MO_KERNELS_CPU_SIMD_H_
