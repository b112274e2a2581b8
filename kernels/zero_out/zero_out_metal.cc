// ZeroOut on Metal: the op's Metal plan (which shader of zero_out.metal, one
// entry point per dtype, which tensor slot at which buffer index, how many
// threads; every Metal path runs it: the CPU kernel's offload, the MSL shim,
// tensorflow-metal) and, on macOS, its kernel on the Metal PluggableDevice
// ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h): int32, int64 and float32 (MSL has no double).
#include <string>

#include "kernels/zero_out/zero_out.h"

namespace mo::metal_plan {

Plan ZeroOut(Dtype dtype, int64_t n, const zero_out::Attrs& a) {
  return OnePass(kZeroOutSlots, "zero_out", std::string("zero_out_") + DtypeSuffix(dtype), static_cast<uint64_t>(n),
                 {{kZeroOutIn, kZeroOutInput}}, {{kZeroOutOut, kZeroOutOutput}}, kZeroOutParams,
                 ZeroOutParams{n, a.preserve_index});
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::zero_out::Attrs;

void ZeroOut(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* input = call.Input(0);
  if (!call.ok()) return;
  const int64_t n = TF_TensorElementCount(input);
  if (!call.Check(mo::zero_out::PreserveIndex(a.preserve_index, n))) return;
  const TF_DataType dtype = TF_TensorType(input);
  TF_Tensor* output = call.Output(0, dtype, mo::metal::DimsOf(input));
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::ZeroOut(mo::metal::PlanDtype(dtype), n, a), {input, output});
}

const bool registered =
    mo::metal::RegisterWithAttrs<Attrs>("ZeroOut", {TF_INT32, TF_INT64, TF_FLOAT}, &mo::metal::Compute<ZeroOut>);

}  // namespace
#endif  // __APPLE__
