// The element-wise ops' Metal plans (kernels/metal_plan/simple_plans.h).
#include "kernels/metal_plan/simple_plans.h"

#include <string>

#include "kernels/common/distortion_loss.h"
#include "kernels/common/robust_loss.h"
#include "kernels/common/sh_encode.h"
#include "kernels/common/trunc_exp.h"
#include "kernels/common/zero_out.h"

namespace mo {
namespace metal_plan {

Plan ZeroOut(Dtype dtype, int64_t n, int64_t preserve_index) {
  return OnePass(kZeroOutSlots, "zero_out", std::string("zero_out_") + DtypeSuffix(dtype), static_cast<uint64_t>(n),
                 {{kZeroOutIn, kZeroOutInput}}, {{kZeroOutOut, kZeroOutOutput}}, kZeroOutParams,
                 ZeroOutParams{n, preserve_index});
}

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

namespace {
std::string SHName(const char* kind, int degree, Dtype dtype) {
  return std::string("sh_encode_") + kind + "_d" + std::to_string(degree) + "_" + DtypeSuffix(dtype);
}
}  // namespace

Plan SHEncodeForward(Dtype dtype, int64_t n, int degree) {
  return OnePass(kSHEncodeSlots, "sh_encode", SHName("forward", degree, dtype), static_cast<uint64_t>(n),
                 {{kSHEncodeDirs, kSHEncodeSlotDirs}}, {{kSHEncodeValues, kSHEncodeSlotValues}}, kSHEncodeParams,
                 SHEncodeParams{n});
}

Plan SHEncodeBackward(Dtype dtype, int64_t n, int degree) {
  return OnePass(kSHEncodeGradSlots, "sh_encode", SHName("backward", degree, dtype), static_cast<uint64_t>(n),
                 {{kSHEncodeGradGrad, kSHEncodeGradSlotGrad}, {kSHEncodeGradDirs, kSHEncodeGradSlotDirs}},
                 {{kSHEncodeGradOut, kSHEncodeGradSlotOut}}, kSHEncodeGradParams, SHEncodeParams{n});
}

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

Plan DistortionLossForward(int64_t rays, int64_t samples) {
  if (rays == 0) return PlanBuilder(kDistortionLossSlots).Finish();
  return OnePass(kDistortionLossSlots, "distortion_loss", "distortion_loss_forward", static_cast<uint64_t>(rays),
                 {{kDistortionLossW, kDistortionLossSlotW}, {kDistortionLossT, kDistortionLossSlotT}},
                 {{kDistortionLossLoss, kDistortionLossSlotLoss}}, kDistortionLossParams,
                 DistortionLossParams{rays, samples});
}

Plan DistortionLossBackward(int64_t rays, int64_t samples) {
  if (rays == 0) return PlanBuilder(kDistortionLossGradSlots).Finish();
  return OnePass(kDistortionLossGradSlots, "distortion_loss", "distortion_loss_backward", static_cast<uint64_t>(rays),
                 {{kDistortionLossGradGrad, kDistortionLossGradSlotGrad},
                  {kDistortionLossGradW, kDistortionLossGradSlotW},
                  {kDistortionLossGradT, kDistortionLossGradSlotT}},
                 {{kDistortionLossGradDw, kDistortionLossGradSlotDw},
                  {kDistortionLossGradDt, kDistortionLossGradSlotDt}},
                 kDistortionLossGradParams, DistortionLossParams{rays, samples});
}

}  // namespace metal_plan
}  // namespace mo
