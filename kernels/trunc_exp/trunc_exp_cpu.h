// TF-independent bodies of the CPU TruncExp kernels (kernels/trunc_exp/trunc_exp_functor.h
// runs them on TF's thread pool): elements [begin, end) a SIMD vector at a time
// (kernels/cpu/activations_simd.h: AVX-512, AVX2 or NEON, whatever the build
// targets), in float32 for float and float16 tensors. Free of TensorFlow
// headers so tests/test_neon_qemu.py can build them for arm64 and run them
// under qemu. The arithmetic is kernels/trunc_exp/trunc_exp.h.
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_CPU_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_CPU_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/trunc_exp/trunc_exp.h"
#include "kernels/cpu/activations_simd.h"
#include "kernels/cpu/simd.h"

namespace mo {
namespace trunc_exp_cpu {

template <typename T>
MO_INLINE void StoreLanes(T* out, simd::V v) {
  if constexpr (std::is_same_v<T, float>) {
    simd::Store(out, v);
  } else {
    float lanes[simd::kLanes];
    simd::Store(lanes, v);
    for (int l = 0; l < simd::kLanes; ++l) out[l] = static_cast<T>(lanes[l]);
  }
}

template <typename T>
MO_INLINE simd::V LoadLanes(const T* in) {
  if constexpr (std::is_same_v<T, float>) {
    return simd::Load(in);
  } else {
    float lanes[simd::kLanes];
    for (int l = 0; l < simd::kLanes; ++l) lanes[l] = static_cast<float>(in[l]);
    return simd::Load(lanes);
  }
}

// Elements [begin, end) in blocks of simd::kLanes: vector(i, x) for a block
// whose x all lie in [low, high] (NaN never does), scalar(i) per element for
// any other block and the tail, so that NaN, infinities and the values where
// simd::Exp clamps take kernels/trunc_exp/trunc_exp.h's formula exactly.
template <typename T, typename Vector, typename Scalar>
MO_INLINE void ForBlocks(const T* x, int64_t begin, int64_t end, float low, float high, Vector vector,
                         Scalar scalar) {
  const simd::V lo = simd::Set(low), hi = simd::Set(high);
  int64_t i = begin;
  for (; i + simd::kLanes <= end; i += simd::kLanes) {
    const simd::V v = LoadLanes(x + i);
    if (simd::AllWithin(v, lo, hi)) {
      vector(i, v);
    } else {
      for (int l = 0; l < simd::kLanes; ++l) scalar(i + l);
    }
  }
  for (; i < end; ++i) scalar(i);
}

// y = exp(x).
template <typename T>
void Forward(const T* x, T* y, int64_t begin, int64_t end) {
  ForBlocks(
      x, begin, end, simd::kExpLow, simd::kExpHigh,
      [&](int64_t i, simd::V v) { StoreLanes(y + i, simd::ActForward(v, kActTruncExp, 0.0f)); },
      [&](int64_t i) { y[i] = static_cast<T>(trunc_exp_forward(static_cast<float>(x[i]))); });
}

// dx = trunc_exp_grad(dy, x). Every x but NaN takes the vector form: simd::Exp's
// clamp lies outside the derivative's [e^-15, e^15].
template <typename T>
void Backward(const T* dy, const T* x, T* dx, int64_t begin, int64_t end) {
  ForBlocks(
      x, begin, end, -INFINITY, INFINITY,
      [&](int64_t i, simd::V v) {
        const simd::V slope = simd::ActDerivative(simd::ActForward(v, kActTruncExp, 0.0f), kActTruncExp, 0.0f);
        StoreLanes(dx + i, simd::Mul(LoadLanes(dy + i), slope));
      },
      [&](int64_t i) { dx[i] = static_cast<T>(trunc_exp_grad(static_cast<float>(dy[i]), static_cast<float>(x[i]))); });
}

}  // namespace trunc_exp_cpu
}  // namespace mo

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_CPU_H_
