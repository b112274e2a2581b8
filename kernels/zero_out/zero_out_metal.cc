// ZeroOut on the Metal PluggableDevice ("GPU" with tensorflow-metal): the
// kernel C API and TF_MetalStream through the shared glue (metal_kernel.h);
// the work is the plan kernels/zero_out/zero_out_plan.cc builds (shader:
// zero_out.metal), the one every Metal path runs.
#include "kernels/metal/metal_kernel.h"

#include "kernels/zero_out/zero_out_plan.h"
#include "kernels/zero_out/zero_out_spec.h"

namespace {

void ZeroOut(void* kernel_ptr, mo::metal::KernelCall& call) {
  const auto& attrs = *static_cast<const mo::zero_out::Attrs*>(kernel_ptr);
  TF_Tensor* input = call.Input(0);
  if (!call.ok()) return;
  const int64_t n = TF_TensorElementCount(input);
  if (!call.Check(mo::zero_out::PreserveIndex(attrs.preserve_index, n))) return;
  const TF_DataType dtype = TF_TensorType(input);
  TF_Tensor* output = call.Output(0, dtype, mo::metal::DimsOf(input));
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::ZeroOut(mo::metal::PlanDtype(dtype), n, attrs.preserve_index), {input, output});
}

// MSL has no double.
const bool registered = mo::metal::RegisterWithAttrs<mo::zero_out::Attrs>("ZeroOut", {TF_INT32, TF_INT64, TF_FLOAT},
                                                                          &mo::metal::Compute<ZeroOut>);

}  // namespace
