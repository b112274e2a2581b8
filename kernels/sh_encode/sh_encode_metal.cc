// SHEncode on the Metal PluggableDevice ("GPU" with tensorflow-metal), through
// the shared glue (metal_kernel.h), float32 and float16. The work is the plan
// of kernels/sh_encode/sh_encode_plan.cc (shaders: sh_encode.metal, one entry
// point per degree and dtype).
#include "kernels/metal/metal_kernel.h"

#include "kernels/sh_encode/sh_encode_plan.h"
#include "kernels/sh_encode/sh_encode_spec.h"

namespace {

using mo::metal::DimsOf;

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const int degree = static_cast<mo::sh_encode::Attrs*>(kernel)->degree;
  TF_Tensor* dirs = call.Input(0);
  if (!call.ok() || !call.Check(mo::sh_encode::DirsShape(DimsOf(dirs)))) return;
  const TF_DataType dtype = TF_TensorType(dirs);
  TF_Tensor* values = call.Output(0, dtype, mo::sh_encode::OutputDims(DimsOf(dirs), degree));
  const int64_t n = TF_TensorElementCount(dirs) / 3;
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::SHEncodeForward(mo::metal::PlanDtype(dtype), n, degree), {dirs, values});
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
  const int64_t n = TF_TensorElementCount(dirs) / 3;
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::SHEncodeBackward(mo::metal::PlanDtype(dtype), n, degree), {grad, dirs, grad_dirs});
}

const bool registered_forward = mo::metal::RegisterWithAttrs<mo::sh_encode::Attrs>(
    "MetalOpsSHEncode", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<mo::sh_encode::Attrs>(
    "MetalOpsSHEncodeGrad", {TF_FLOAT, TF_HALF}, &mo::metal::Compute<Backward>);

}  // namespace
