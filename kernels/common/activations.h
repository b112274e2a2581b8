// Activation functions and their derivatives, once for every backend.
//
// Every op with an activation (FusedConv2D's output stage and
// MetalOpsFusedActivationGrad, FusedMLP on every backend) includes this header
// instead of writing its own; the MPSGraph activations of
// kernels/fused_conv2d/fused_conv2d_metal.mm mirror it.
//
// NaN in gives NaN out: every forward formula passes a NaN pre-activation
// through (relu and relu6 compare with `z < 0`, so a NaN is not clamped), as
// a Dense layer's activation does, so a NaN in the data reaches the loss.
//
// Derivatives are expressed from the activation's OUTPUT y = f(z) where that is
// exact (so the backward pass does not need the pre-activation z): relu, relu6,
// elu, leaky_relu (alpha >= 0), sigmoid, tanh. swish (z * sigmoid(z)) cannot be
// inverted, so its derivative takes z.
#ifndef MO_KERNELS_COMMON_ACTIVATIONS_H_
#define MO_KERNELS_COMMON_ACTIVATIONS_H_

#include "kernels/common/platform.h"

namespace mo {

// Stable numbering: the value is stored in Metal parameter structs and cache
// keys. The string names are the op attr values (see ActivationFromName).
enum Activation {
  kActNone = 0,
  kActRelu = 1,
  kActRelu6 = 2,
  kActElu = 3,
  kActLeakyRelu = 4,
  kActSigmoid = 5,
  kActTanh = 6,
  kActSwish = 7,
  kActSoftplus = 8,
  kActTruncExp = 9,  // exp with the gradient clamped (instant-NGP's density activation)
};

// e^15: trunc_exp's gradient is exp(clamp(z, -15, 15)).
#define MO_TRUNC_EXP_LIMIT 3269017.3724721107f

// 1 / (1 + e^-z) without overflow for large |z|. A function of its own so
// that swish needs no recursive call (MSL has no recursion).
MO_FN float sigmoid_f(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + exp_f(-z));
  const float e = exp_f(z);
  return e / (1.0f + e);
}

// f(z). `alpha` is only read by leaky_relu.
MO_FN float activation_forward(float z, int act, float alpha) {
  switch (act) {
    case kActRelu:
      return z < 0.0f ? 0.0f : z;
    case kActRelu6:
      return z < 0.0f ? 0.0f : (z > 6.0f ? 6.0f : z);
    case kActElu:
      return z > 0.0f ? z : expm1_f(z);
    case kActLeakyRelu:
      return z > 0.0f ? z : alpha * z;
    case kActSigmoid:
      return sigmoid_f(z);
    case kActTanh: {
      // tanh(z) = 1 - 2 / (e^{2z} + 1); saturates cleanly at +-1.
      if (z > 15.0f) return 1.0f;
      if (z < -15.0f) return -1.0f;
      const float e = expm1_f(2.0f * z);
      return e / (e + 2.0f);
    }
    case kActSwish:
      return z * sigmoid_f(z);
    case kActSoftplus:
      // log(1 + e^z) without overflow: z + log1p(e^-z) for positive z.
      return z > 0.0f ? z + log1p_f(exp_f(-z)) : log1p_f(exp_f(z));
    case kActTruncExp:
      return exp_f(z);
    default:
      return z;
  }
}

// True when activation_derivative_from_output is exact for this activation.
MO_FN bool activation_grad_uses_output(int act, float alpha) {
  if (act == kActSwish) return false;
  if (act == kActLeakyRelu) return alpha >= 0.0f;
  return true;
}

// d f / d z expressed with y = f(z). Matches TensorFlow's ReluGrad, Relu6Grad,
// EluGrad, LeakyReluGrad, SigmoidGrad, TanhGrad conventions at the kinks
// (derivative 0 at z == 0 for relu / relu6, 0 at the relu6 upper bound).
MO_FN float activation_derivative_from_output(float y, int act, float alpha) {
  switch (act) {
    case kActRelu:
      return y > 0.0f ? 1.0f : 0.0f;
    case kActRelu6:
      return (y > 0.0f && y < 6.0f) ? 1.0f : 0.0f;
    case kActElu:
      return y > 0.0f ? 1.0f : y + 1.0f;
    case kActLeakyRelu:
      return y > 0.0f ? 1.0f : alpha;
    case kActSigmoid:
      return y * (1.0f - y);
    case kActTanh:
      return 1.0f - y * y;
    case kActSoftplus:
      return -expm1_f(-y);  // sigmoid(z) = 1 - e^-y
    case kActTruncExp:
      return y < 1.0f / MO_TRUNC_EXP_LIMIT ? 1.0f / MO_TRUNC_EXP_LIMIT
                                          : (y > MO_TRUNC_EXP_LIMIT ? MO_TRUNC_EXP_LIMIT : y);
    default:
      return 1.0f;
  }
}

// d f / d z from the pre-activation z (every activation; swish needs it).
MO_FN float activation_derivative_from_input(float z, int act, float alpha) {
  switch (act) {
    case kActSwish: {
      const float s = sigmoid_f(z);
      return s * (1.0f + z * (1.0f - s));
    }
    case kActLeakyRelu:
      return z > 0.0f ? 1.0f : alpha;
    default:
      return activation_derivative_from_output(activation_forward(z, act, alpha), act, alpha);
  }
}

#if !defined(__METAL_VERSION__)
// The op attribute value of each activation, by number ("none", "relu", ...).
// Host code; nvcc's device pass reads it too (kernels/fused_mlp/fused_mlp.h, which
// the CUDA launchers include for the network limits).
constexpr const char* kActivationNames[] = {"none",       "relu",    "relu6", "elu",      "leaky_relu",
                                            "sigmoid",    "tanh",    "swish", "softplus", "trunc_exp"};
constexpr int kNumActivations = 10;

// The activation named `name`, or -1.
inline int activation_from_name(const char* name) {
  for (int i = 0; i < kNumActivations; ++i) {
    const char* a = kActivationNames[i];
    const char* b = name;
    while (*a != '\0' && *a == *b) {
      ++a;
      ++b;
    }
    if (*a == '\0' && *b == '\0') return i;
  }
  return -1;
}
#endif

// Conv output stage: z = acc + bias + residual, then y = f(z). One element.
MO_FN float fused_output_element(float acc, float bias, float residual, int act, float alpha) {
  return activation_forward(acc + bias + residual, act, alpha);
}

}  // namespace mo

#endif  // MO_KERNELS_COMMON_ACTIVATIONS_H_
