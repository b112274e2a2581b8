// TruncExp on the Metal PluggableDevice ("GPU" with tensorflow-metal), through
// the shared glue (metal_kernel.h), float32 and float16. Shaders:
// trunc_exp.metal (one thread per element, kernels/common/trunc_exp.h).
#import "kernels/metal/metal_kernel.h"

#include <string>

#include "kernels/common/trunc_exp.h"
#include "kernels/spec/trunc_exp_spec.h"

namespace {

using mo::metal::DimsOf;

std::string Shader(const char* kind, TF_DataType dtype) {
  return std::string("trunc_exp_") + kind + (dtype == TF_HALF ? "_float16" : "_float32");
}

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  if (!call.ok()) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* y = call.Output(0, dtype, DimsOf(x));
  const mo::TruncExpParams params = {TF_TensorElementCount(x)};
  if (!call.ok() || params.num_elements == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("trunc_exp", Shader("forward", dtype));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(mo::kTruncExpX, x).Tensor(mo::kTruncExpY, y).Value(mo::kTruncExpParams, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_elements));
  });
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* x = call.Input(1);
  if (!call.ok() || !call.Check(mo::trunc_exp::GradShape(DimsOf(dy), DimsOf(x)))) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  const mo::TruncExpParams params = {TF_TensorElementCount(x)};
  if (!call.ok() || params.num_elements == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("trunc_exp", Shader("backward", dtype));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(mo::kTruncExpGradDy, dy).Tensor(mo::kTruncExpGradX, x).Tensor(mo::kTruncExpGradDx, dx);
    e.Value(mo::kTruncExpGradParams, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_elements));
  });
}

bool Register() {
  for (TF_DataType type : {TF_FLOAT, TF_HALF}) {
    mo::metal::RegisterKernel("MetalOpsTruncExp", type, &mo::metal::CreateNothing, &mo::metal::Compute<Forward>,
                              &mo::metal::DeleteNothing);
    mo::metal::RegisterKernel("MetalOpsTruncExpGrad", type, &mo::metal::CreateNothing,
                              &mo::metal::Compute<Backward>, &mo::metal::DeleteNothing);
  }
  return true;
}

const bool registered = Register();

}  // namespace
