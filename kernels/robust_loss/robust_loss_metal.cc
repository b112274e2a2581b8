// RobustLoss on Metal: the op's Metal plans (which shader of robust_loss.metal,
// which tensor slot at which buffer index, how many threads, which
// zero-fills; every Metal path runs them: the CPU kernels' offload, the MSL
// shim, tensorflow-metal) and, on macOS, its kernels on the Metal
// PluggableDevice ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h): float32 and float16 (MSL's bfloat needs
// Metal 3.1 and is not registered). alpha / scale stay on the device: invalid
// values give NaN elements (no host read-back).
#include <string>

#include "kernels/robust_loss/robust_loss.h"

namespace mo::metal_plan {

namespace {
RobustLossParams RobustParams(const RobustLossLayout& layout) {
  RobustLossParams p = {};
  p.num_elements = layout.num_elements;
  p.channels = layout.channels;
  p.rows = layout.channels > 0 ? layout.num_elements / layout.channels : 0;
  p.alpha_vec = layout.alpha_vec ? 1 : 0;
  p.scale_vec = layout.scale_vec ? 1 : 0;
  return p;
}
}  // namespace

Plan RobustLossForward(Dtype dtype, const RobustLossLayout& layout) {
  if (layout.num_elements == 0) return PlanBuilder(kRobustLossSlots).Finish();
  return OnePass(kRobustLossSlots, "robust_loss", std::string("robust_loss_forward_") + DtypeSuffix(dtype),
                 static_cast<uint64_t>(layout.num_elements),
                 {{kRobustLossX, kRobustLossSlotX}, {kRobustLossAlpha, kRobustLossSlotAlpha},
                  {kRobustLossScale, kRobustLossSlotScale}},
                 {{kRobustLossOut, kRobustLossSlotOut}}, kRobustLossParams, RobustParams(layout));
}

Plan RobustLossBackward(Dtype dtype, const RobustLossLayout& layout, int64_t alpha_count, int64_t scale_count) {
  PlanBuilder b(kRobustLossGradSlots);
  // The shader adds each thread's sums to dalpha / dscale with atomics: zero
  // them first (also when x is empty, so the gradients are zeros).
  b.Zero(kRobustLossGradSlotDalpha, static_cast<uint64_t>(alpha_count) * sizeof(float));
  b.Zero(kRobustLossGradSlotDscale, static_cast<uint64_t>(scale_count) * sizeof(float));
  const int64_t n = layout.num_elements;
  if (n == 0) return b.Finish();
  b.OrderDependent();  // dalpha / dscale: float atomics
  const uint64_t threads = static_cast<uint64_t>(n) < kRobustLossMaxGradThreads ? static_cast<uint64_t>(n)
                                                                                : kRobustLossMaxGradThreads;
  b.Threads("robust_loss", std::string("robust_loss_backward_") + DtypeSuffix(dtype), threads)
      .Tensors({{kRobustLossGradGrad, kRobustLossGradSlotGrad}, {kRobustLossGradX, kRobustLossGradSlotX},
                {kRobustLossGradAlpha, kRobustLossGradSlotAlpha}, {kRobustLossGradScale, kRobustLossGradSlotScale}},
               {{kRobustLossGradDx, kRobustLossGradSlotDx}, {kRobustLossGradDalpha, kRobustLossGradSlotDalpha},
                {kRobustLossGradDscale, kRobustLossGradSlotDscale}})
      .Value(kRobustLossGradParams, RobustParams(layout));
  return b.Finish();
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;

// The layout of x / alpha / scale, or false having failed the call naming the argument.
bool LayoutOf(mo::metal::KernelCall& call, TF_Tensor* x, TF_Tensor* alpha, TF_Tensor* scale,
              mo::metal_plan::RobustLossLayout* out) {
  mo::robust_loss::ParamLayout layout;
  if (!call.Check(mo::robust_loss::ParamShapes(DimsOf(x), DimsOf(alpha), DimsOf(scale), &layout))) return false;
  *out = {TF_TensorElementCount(x), layout.channels, layout.alpha_vec, layout.scale_vec};
  return true;
}

void Forward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* x = call.Input(0);
  TF_Tensor* alpha = call.Input(1);
  TF_Tensor* scale = call.Input(2);
  mo::metal_plan::RobustLossLayout layout = {};
  if (!call.ok() || !LayoutOf(call, x, alpha, scale, &layout)) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* out = call.Output(0, dtype, DimsOf(x));
  if (!call.ok() || layout.num_elements == 0) return;
  call.RunPlan(mo::metal_plan::RobustLossForward(mo::metal::PlanDtype(dtype), layout), {x, alpha, scale, out});
}

void Backward(void*, mo::metal::KernelCall& call) {
  TF_Tensor* grad = call.Input(0);
  TF_Tensor* x = call.Input(1);
  TF_Tensor* alpha = call.Input(2);
  TF_Tensor* scale = call.Input(3);
  if (!call.ok()) return;
  if (!call.Check(mo::robust_loss::GradShape(DimsOf(grad), DimsOf(x)))) return;
  mo::metal_plan::RobustLossLayout layout = {};
  if (!LayoutOf(call, x, alpha, scale, &layout)) return;
  const TF_DataType dtype = TF_TensorType(x);
  TF_Tensor* dx = call.Output(0, dtype, DimsOf(x));
  TF_Tensor* dalpha = call.Output(1, TF_FLOAT, DimsOf(alpha));
  TF_Tensor* dscale = call.Output(2, TF_FLOAT, DimsOf(scale));
  if (!call.ok()) return;
  call.RunPlan(mo::metal_plan::RobustLossBackward(mo::metal::PlanDtype(dtype), layout, TF_TensorElementCount(alpha),
                                                  TF_TensorElementCount(scale)),
               {grad, x, alpha, scale, dx, dalpha, dscale});
}

const bool registered = mo::metal::RegisterStateless("MetalOpsRobustLoss", &mo::metal::Compute<Forward>,
                                                     "MetalOpsRobustLossGrad", &mo::metal::Compute<Backward>,
                                                     {TF_FLOAT, TF_HALF});

}  // namespace
#endif  // __APPLE__
