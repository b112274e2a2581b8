// TruncExp, instant-NGP's density activation: y = exp(x), with the gradient
// dy * exp(clamp(x, -15, 15)), so a density logit far from 0 neither stops
// learning nor blows up its update. The formula is FusedMLP's "trunc_exp"
// output activation (kernels/common/activations.h), reused here so the op and
// the fused network agree to the bit.
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_H_

#include "kernels/common/activations.h"
#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
struct TruncExpParams {
  int64 num_elements;
};

// Buffer indices, shared by kernels/trunc_exp/trunc_exp.metal and trunc_exp_metal.cc.
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

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_H_
