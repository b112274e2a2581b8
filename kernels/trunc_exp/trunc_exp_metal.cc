// TruncExp on Metal: the op's Metal plans (which shader of trunc_exp.metal,
// which tensor slot at which buffer index, how many threads; every Metal path
// runs them: the CPU kernels' offload, the MSL shim, tensorflow-metal) and, on
// macOS, its kernels on the Metal PluggableDevice ("GPU" with
// tensorflow-metal) through the shared glue (kernels/metal/metal_kernel.h),
// float32 and float16.
#include <string>

#include "kernels/trunc_exp/trunc_exp.h"

namespace mo::metal_plan {

Plan TruncExpForward(Dtype dtype, int64_t n) {
  return OnePass(kTruncExpSlots, "trunc_exp", std::string("trunc_exp_forward_") + DtypeSuffix(dtype),
                 static_cast<uint64_t>(n), {{kTruncExpX, kTruncExpSlotX}}, {{kTruncExpY, kTruncExpSlotY}},
                 kTruncExpParams, TruncExpParams{n});
}

Plan TruncExpBackward(Dtype dtype, int64_t n) {
  return OnePass(kTruncExpGradSlots, "trunc_exp", std::string("trunc_exp_backward_") + DtypeSuffix(dtype),
                 static_cast<uint64_t>(n),
                 {{kTruncExpGradDy, kTruncExpGradSlotDy}, {kTruncExpGradX, kTruncExpGradSlotX}},
                 {{kTruncExpGradDx, kTruncExpGradSlotDx}}, kTruncExpGradParams, TruncExpParams{n});
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  if (!call.ok()) return;
  call.RunPointwise(x, mo::metal::DimsOf(x), 1, {x}, &mo::metal_plan::TruncExpForward);
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* dy = call.Input(0);
  TF_Tensor* x = call.Input(1);
  if (!call.ok() || !call.Check(mo::trunc_exp::GradShape(mo::metal::DimsOf(dy), mo::metal::DimsOf(x)))) return;
  call.RunPointwise(x, mo::metal::DimsOf(x), 1, {dy, x}, &mo::metal_plan::TruncExpBackward);
}

const bool registered = mo::metal::RegisterStateless("MetalOpsTruncExp", &mo::metal::Compute<Forward>,
                                                     "MetalOpsTruncExpGrad", &mo::metal::Compute<Backward>,
                                                     {TF_FLOAT, TF_HALF});

}  // namespace
#endif  // __APPLE__
