// TruncExp, instant-NGP's density activation: y = exp(x), with the gradient
// dy * exp(clamp(x, -15, 15)), so a density logit far from 0 neither stops
// learning nor blows up its update. The formula is FusedMLP's "trunc_exp"
// output activation (kernels/common/activations.h), reused here so the op and
// the fused network agree to the bit. This header is the op's one description
// shared by every backend: the formulas, the op's declaration (no attribute
// but its type T: MO_TRUNC_EXP_ATTRS is empty) and, in host code, the checks,
// the Metal plans' and CUDA launchers' signatures and the CPU bodies. The op's
// files (docs/ADDING_AN_OP.md):
//   trunc_exp_op.cc     REGISTER_OP                 trunc_exp_cpu.cc    CPU kernels, XLA host handlers
//   trunc_exp.cu.cc     CUDA kernels, launchers     trunc_exp_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   trunc_exp.metal     Metal shaders               trunc_exp_metal.cc  Metal plans, tensorflow-metal glue
//   trunc_exp_xla.cc    XLA op kernels
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_H_

#include "kernels/common/activations.h"
#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
struct TruncExpParams {
  int64 num_elements;
};

// Buffer indices, shared by trunc_exp.metal and the plans of trunc_exp_metal.cc.
enum TruncExpBuffers {
  kTruncExpX = 0,       // forward: x
  kTruncExpY = 1,       // forward: y
  kTruncExpParams = 2,  // forward: TruncExpParams
  kTruncExpGradDy = 0,  // backward: dy
  kTruncExpGradX = 1,   // backward: x
  kTruncExpGradDx = 2,  // backward: dx
  kTruncExpGradParams = 3,
};

// exp(x).
MO_FN float trunc_exp_forward(float x) { return activation_forward(x, kActTruncExp, 0.0f); }

// dy * exp(clamp(x, -15, 15)); NaN in x or dy gives NaN.
MO_FN float trunc_exp_grad(float dy, float x) {
  return dy * activation_derivative_from_input(x, kActTruncExp, 0.0f);
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsTruncExp(x) -> y and MetalOpsTruncExpGrad(dy, x) -> dx, any shape,
// T in {float, half}; no other attribute.
#define MO_TRUNC_EXP_ATTRS(ATTR)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace trunc_exp {

// Attrs {} (none), ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("TruncExp", MO_TRUNC_EXP_ATTRS);

// A point of the kernels (kernels/framework/pointwise_kernel.h): one element.
constexpr int64_t kPointSize = 1;

// The checks (no TensorFlow API: sizes in, kernels/spec/checks.h's Result
// out), written once for the TensorFlow kernels, the Metal glue and XLA's op
// kernels; the shape functions are TensorFlow's (trunc_exp_op.cc). Messages
// name the argument; tests match on them. The upstream gradient of
// TruncExpGrad has the shape of x.
inline Result GradShape(const Dims& dy, const Dims& x) {
  if (dy != x) {
    return Invalid("TruncExpGrad: 'dy' has shape ", ShapeString(dy), " but 'x' has shape ", ShapeString(x));
  }
  return Ok();
}

// The kernels' checks (kernels/framework/pointwise_kernel.h): any x, y of its
// dims; dy of x's.
inline Result Shapes(const Attrs&, const Dims& x, Dims* y) {
  *y = x;
  return Ok();
}

inline Result GradShapes(const Attrs&, const Dims& dy, const Dims& x) { return GradShape(dy, x); }

}  // namespace trunc_exp
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (trunc_exp_metal.cc), every Metal path's (kernels/metal_plan/plan.h):
// forward slots {x, y}, backward {dy, x, dx}; n > 0 elements.
namespace mo::metal_plan {
enum TruncExpSlots { kTruncExpSlotX, kTruncExpSlotY, kTruncExpSlots };
enum TruncExpGradSlots { kTruncExpGradSlotDy, kTruncExpGradSlotX, kTruncExpGradSlotDx, kTruncExpGradSlots };
Plan TruncExpForward(Dtype dtype, int64_t n);
Plan TruncExpBackward(Dtype dtype, int64_t n);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// The CUDA launchers (trunc_exp.cu.cc), plain C++: the TF GPU kernels and
// XLA's CUDA handlers (trunc_exp_cuda.cc) and the C-ABI harness
// (tests/cuda/trunc_exp_harness.cu.cc). T is float or __half (computed in float).
namespace mo::cuda {
// y[i] = exp(x[i]) for n elements.
template <typename T>
cudaError_t LaunchTruncExpForward(const T* x, T* y, int64_t n, cudaStream_t stream);
// dx[i] = dy[i] * exp(clamp(x[i], -15, 15)).
template <typename T>
cudaError_t LaunchTruncExpBackward(const T* dy, const T* x, T* dx, int64_t n, cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_CPU_BODIES)
// The CPU kernels' bodies, free of TensorFlow (trunc_exp_cpu.cc runs them on
// TF's thread pool; tests/neon/cpu_ops_main.cc builds them for arm64 and runs
// them under qemu); a file that wants them defines MO_CPU_BODIES before the
// include, so the other host code of the op needs no SIMD headers. Elements
// [begin, end) a SIMD vector at a time (kernels/cpu/activations_simd.h:
// AVX-512, AVX2 or NEON, whatever the build targets), in float32 for float and
// float16 tensors.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/activations_simd.h"  // host
#include "kernels/cpu/simd.h"  // host

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
// simd::Exp clamps take the formula above exactly.
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
#endif  // MO_CPU_BODIES
#endif  // host code

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_H_
