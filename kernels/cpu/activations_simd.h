// kernels/common/activations.h on a SIMD vector (kernels/cpu/simd.h): a vector
// formula for the activations that have one, activations.h's scalar formula
// lane by lane for the others. Used by the CPU FusedMLP and TruncExp.
#ifndef MO_KERNELS_CPU_ACTIVATIONS_SIMD_H_
#define MO_KERNELS_CPU_ACTIVATIONS_SIMD_H_

#include "kernels/common/activations.h"
#include "kernels/cpu/simd.h"

namespace mo {
namespace simd {

// f(z) (activations.h's activation_forward).
MO_INLINE V ActForward(V z, int act, float alpha) {
  switch (act) {
    case kActRelu: return simd::Max(simd::Zero(), z);  // NaN z stays NaN (Max's second operand)
    case kActLeakyRelu: return simd::SelectPositive(z, z, simd::Mul(z, simd::Set(alpha)));
    case kActSigmoid:  // 1 / (1 + e^-z); Exp's clamp keeps e^-z finite
      return simd::Div(simd::Set(1.0f), simd::Add(simd::Set(1.0f), simd::Exp(simd::Sub(simd::Zero(), z))));
    case kActTruncExp: return simd::Exp(z);
    case kActNone: return z;
    default: return simd::MapLanes(z, [act, alpha](float v) { return activation_forward(v, act, alpha); });
  }
}

// d f / d z from the output y (activations.h's activation_derivative_from_output).
MO_INLINE V ActDerivative(V y, int act, float alpha) {
  switch (act) {
    case kActRelu: return simd::SelectPositive(y, simd::Set(1.0f), simd::Zero());
    case kActLeakyRelu: return simd::SelectPositive(y, simd::Set(1.0f), simd::Set(alpha));
    case kActSigmoid: return simd::Mul(y, simd::Sub(simd::Set(1.0f), y));
    case kActTruncExp:
      return simd::Min(simd::Max(y, simd::Set(1.0f / MO_TRUNC_EXP_LIMIT)), simd::Set(MO_TRUNC_EXP_LIMIT));
    case kActNone: return simd::Set(1.0f);
    default:
      return simd::MapLanes(y, [act, alpha](float v) { return activation_derivative_from_output(v, act, alpha); });
  }
}

}  // namespace simd
}  // namespace mo

#endif  // MO_KERNELS_CPU_ACTIVATIONS_SIMD_H_
