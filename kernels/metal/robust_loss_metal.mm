// RobustLoss on the Metal PluggableDevice ("GPU" with tensorflow-metal),
// through the shared glue (metal_kernel.h). Shaders: robust_loss.metal
// (formulas from kernels/common/robust_loss.h). float32 and float16 (MSL's
// bfloat needs Metal 3.1 and is not registered). alpha / scale stay on the
// device: invalid values give NaN elements (no host read-back).
#import "kernels/metal/metal_kernel.h"

#include <string>
#include <vector>

#include "kernels/common/robust_loss.h"
#include "kernels/spec/robust_loss_spec.h"

namespace {

using mo::metal::DimsOf;

// Fills params for x / alpha / scale, or fails the call naming the argument.
bool LayoutOf(mo::metal::KernelCall& call, TF_Tensor* x, TF_Tensor* alpha, TF_Tensor* scale,
              mo::RobustLossParams* params) {
  mo::robust_loss::ParamLayout layout;
  if (!call.Check(mo::robust_loss::ParamShapes(DimsOf(x), DimsOf(alpha), DimsOf(scale), &layout))) {
    return false;
  }
  params->num_elements = TF_TensorElementCount(x);
  params->channels = layout.channels;
  params->rows = layout.channels > 0 ? params->num_elements / layout.channels : 0;
  params->alpha_vec = layout.alpha_vec ? 1 : 0;
  params->scale_vec = layout.scale_vec ? 1 : 0;
  return true;
}

std::string Shader(const char* kind, TF_DataType dtype) {
  return std::string("robust_loss_") + kind + (dtype == TF_HALF ? "_float16" : "_float32");
}

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  TF_Tensor* alpha = call.Input(1);
  TF_Tensor* scale = call.Input(2);
  mo::RobustLossParams params = {};
  if (!call.ok() || !LayoutOf(call, x, alpha, scale, &params)) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* out = call.Output(0, dtype, DimsOf(x));
  if (!call.ok() || params.num_elements == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("robust_loss", Shader("forward", dtype));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, x).Tensor(1, alpha).Tensor(2, scale).Tensor(3, out).Value(4, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_elements));
  });
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* x = call.Input(1);
  TF_Tensor* alpha = call.Input(2);
  TF_Tensor* scale = call.Input(3);
  if (!call.ok()) return;
  if (!call.Check(mo::robust_loss::GradShape(DimsOf(grad), DimsOf(x)))) return;
  mo::RobustLossParams params = {};
  if (!LayoutOf(call, x, alpha, scale, &params)) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  TF_Tensor* dalpha = call.Output(1, TF_FLOAT, DimsOf(alpha));
  TF_Tensor* dscale = call.Output(2, TF_FLOAT, DimsOf(scale));
  if (!call.ok()) return;
  const int64_t n = params.num_elements;
  id<MTLComputePipelineState> pipeline = n > 0 ? call.Pipeline("robust_loss", Shader("backward", dtype)) : nil;
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    // The shader accumulates dalpha / dscale with atomics: zero them first
    // (also when x is empty, so the gradients are zeros).
    e.Zero(dalpha).Zero(dscale);
    if (n == 0) return;
    e.Tensor(0, grad).Tensor(1, x).Tensor(2, alpha).Tensor(3, scale);
    e.Tensor(4, dx).Tensor(5, dalpha).Tensor(6, dscale).Value(7, params);
    // Threads loop over rows; capping the grid caps the number of atomics.
    e.Dispatch(pipeline, n < (int64_t(1) << 16) ? static_cast<uint64_t>(n) : (uint64_t(1) << 16));
  });
}

bool Register() {
  for (TF_DataType type : {TF_FLOAT, TF_HALF}) {
    mo::metal::RegisterKernel("MetalOpsRobustLoss", type, &mo::metal::CreateNothing, &mo::metal::Compute<Forward>,
                              &mo::metal::DeleteNothing);
    mo::metal::RegisterKernel("MetalOpsRobustLossGrad", type, &mo::metal::CreateNothing,
                              &mo::metal::Compute<Backward>, &mo::metal::DeleteNothing);
  }
  return true;
}

const bool registered = Register();

}  // namespace
