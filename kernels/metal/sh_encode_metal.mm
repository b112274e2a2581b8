// SHEncode on the Metal PluggableDevice ("GPU" with tensorflow-metal), through
// the shared glue (metal_kernel.h), float32 and float16. Shaders:
// sh_encode.metal (one thread per direction, kernels/common/sh_encode.h), one
// entry point per degree and dtype.
#import "kernels/metal/metal_kernel.h"

#include <cstdio>
#include <string>

#include "kernels/common/sh_encode.h"
#include "kernels/spec/sh_encode_spec.h"

namespace {

using mo::metal::DimsOf;

std::string ShaderName(const char* kind, int degree, TF_DataType dtype) {
  char name[64];
  std::snprintf(name, sizeof(name), "sh_encode_%s_d%d_%s", kind, degree, dtype == TF_HALF ? "float16" : "float32");
  return name;
}

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const int degree = static_cast<mo::sh_encode::Attrs*>(kernel)->degree;
  TF_Tensor* dirs = call.Input(0);
  if (!call.ok() || !call.Check(mo::sh_encode::DirsShape(DimsOf(dirs)))) return;
  const TF_DataType dtype = TF_TensorType(dirs);
  TF_Tensor* values = call.Output(0, dtype, mo::sh_encode::OutputDims(DimsOf(dirs), degree));
  const mo::SHEncodeParams params = {TF_TensorElementCount(dirs) / 3};
  if (!call.ok() || params.num_points == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("sh_encode", ShaderName("forward", degree, dtype));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, dirs).Tensor(1, values).Value(2, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_points));
  });
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const int degree = static_cast<mo::sh_encode::Attrs*>(kernel)->degree;
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* dirs = call.Input(1);
  if (!call.ok() || !call.Check(mo::sh_encode::DirsShape(DimsOf(dirs))) ||
      !call.Check(mo::sh_encode::GradShape(DimsOf(grad), DimsOf(dirs), degree))) {
    return;
  }
  const TF_DataType dtype = TF_TensorType(dirs);
  TF_Tensor* grad_dirs = call.Output(0, dtype, DimsOf(dirs));
  const mo::SHEncodeParams params = {TF_TensorElementCount(dirs) / 3};
  if (!call.ok() || params.num_points == 0) return;
  id<MTLComputePipelineState> pipeline = call.Pipeline("sh_encode", ShaderName("backward", degree, dtype));
  if (!call.ok()) return;
  call.Encode([&](mo::metal::Encoder& e) {
    e.Tensor(0, grad).Tensor(1, dirs).Tensor(2, grad_dirs).Value(3, params);
    e.Dispatch(pipeline, static_cast<uint64_t>(params.num_points));
  });
}

const bool registered_forward = mo::metal::RegisterWithAttrs<mo::sh_encode::Attrs>(
    "MetalOpsSHEncode", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::sh_encode::Attrs>(
    "MetalOpsSHEncodeGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
