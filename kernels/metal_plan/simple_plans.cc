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
  const ZeroOutParams params = {n, preserve_index};
  PlanBuilder b(kZeroOutSlots);
  b.Threads("zero_out", std::string("zero_out_") + DtypeSuffix(dtype), static_cast<uint64_t>(n))
      .Tensor(kZeroOutIn, kZeroOutInput)
      .Output(kZeroOutOut, kZeroOutOutput)
      .Value(kZeroOutParams, params);
  return b.Finish();
}

Plan TruncExpForward(Dtype dtype, int64_t n) {
  const TruncExpParams params = {n};
  PlanBuilder b(kTruncExpSlots);
  b.Threads("trunc_exp", std::string("trunc_exp_forward_") + DtypeSuffix(dtype), static_cast<uint64_t>(n))
      .Tensor(kTruncExpX, kTruncExpSlotX)
      .Output(kTruncExpY, kTruncExpSlotY)
      .Value(kTruncExpParams, params);
  return b.Finish();
}

Plan TruncExpBackward(Dtype dtype, int64_t n) {
  const TruncExpParams params = {n};
  PlanBuilder b(kTruncExpGradSlots);
  b.Threads("trunc_exp", std::string("trunc_exp_backward_") + DtypeSuffix(dtype), static_cast<uint64_t>(n))
      .Tensor(kTruncExpGradDy, kTruncExpGradSlotDy)
      .Tensor(kTruncExpGradX, kTruncExpGradSlotX)
      .Output(kTruncExpGradDx, kTruncExpGradSlotDx)
      .Value(kTruncExpGradParams, params);
  return b.Finish();
}

namespace {
std::string SHName(const char* kind, int degree, Dtype dtype) {
  return std::string("sh_encode_") + kind + "_d" + std::to_string(degree) + "_" + DtypeSuffix(dtype);
}
}  // namespace

Plan SHEncodeForward(Dtype dtype, int64_t n, int degree) {
  const SHEncodeParams params = {n};
  PlanBuilder b(kSHEncodeSlots);
  b.Threads("sh_encode", SHName("forward", degree, dtype), static_cast<uint64_t>(n))
      .Tensor(kSHEncodeDirs, kSHEncodeSlotDirs)
      .Output(kSHEncodeValues, kSHEncodeSlotValues)
      .Value(kSHEncodeParams, params);
  return b.Finish();
}

Plan SHEncodeBackward(Dtype dtype, int64_t n, int degree) {
  const SHEncodeParams params = {n};
  PlanBuilder b(kSHEncodeGradSlots);
  b.Threads("sh_encode", SHName("backward", degree, dtype), static_cast<uint64_t>(n))
      .Tensor(kSHEncodeGradGrad, kSHEncodeGradSlotGrad)
      .Tensor(kSHEncodeGradDirs, kSHEncodeGradSlotDirs)
      .Output(kSHEncodeGradOut, kSHEncodeGradSlotOut)
      .Value(kSHEncodeGradParams, params);
  return b.Finish();
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
  PlanBuilder b(kRobustLossSlots);
  if (layout.num_elements == 0) return b.Finish();
  b.Threads("robust_loss", std::string("robust_loss_forward_") + DtypeSuffix(dtype),
            static_cast<uint64_t>(layout.num_elements))
      .Tensor(kRobustLossX, kRobustLossSlotX)
      .Tensor(kRobustLossAlpha, kRobustLossSlotAlpha)
      .Tensor(kRobustLossScale, kRobustLossSlotScale)
      .Output(kRobustLossOut, kRobustLossSlotOut)
      .Value(kRobustLossParams, RobustParams(layout));
  return b.Finish();
}

Plan RobustLossBackward(Dtype dtype, const RobustLossLayout& layout, int64_t alpha_count, int64_t scale_count) {
  PlanBuilder b(kRobustLossGradSlots);
  // The shader adds each thread's sums to dalpha / dscale with atomics: zero
  // them first (also when x is empty, so the gradients are zeros).
  b.Zero(kRobustLossGradSlotDalpha, static_cast<uint64_t>(alpha_count) * sizeof(float));
  b.Zero(kRobustLossGradSlotDscale, static_cast<uint64_t>(scale_count) * sizeof(float));
  const int64_t n = layout.num_elements;
  if (n == 0) return b.Finish();
  const uint64_t threads = static_cast<uint64_t>(n) < kRobustLossMaxGradThreads ? static_cast<uint64_t>(n)
                                                                                : kRobustLossMaxGradThreads;
  b.Threads("robust_loss", std::string("robust_loss_backward_") + DtypeSuffix(dtype), threads)
      .Tensor(kRobustLossGradGrad, kRobustLossGradSlotGrad)
      .Tensor(kRobustLossGradX, kRobustLossGradSlotX)
      .Tensor(kRobustLossGradAlpha, kRobustLossGradSlotAlpha)
      .Tensor(kRobustLossGradScale, kRobustLossGradSlotScale)
      .Output(kRobustLossGradDx, kRobustLossGradSlotDx)
      .Output(kRobustLossGradDalpha, kRobustLossGradSlotDalpha)
      .Output(kRobustLossGradDscale, kRobustLossGradSlotDscale)
      .Value(kRobustLossGradParams, RobustParams(layout));
  return b.Finish();
}

Plan DistortionLossForward(int64_t rays, int64_t samples) {
  const DistortionLossParams params = {rays, samples};
  PlanBuilder b(kDistortionLossSlots);
  if (rays == 0) return b.Finish();
  b.Threads("distortion_loss", "distortion_loss_forward", static_cast<uint64_t>(rays))
      .Tensor(kDistortionLossW, kDistortionLossSlotW)
      .Tensor(kDistortionLossT, kDistortionLossSlotT)
      .Output(kDistortionLossLoss, kDistortionLossSlotLoss)
      .Value(kDistortionLossParams, params);
  return b.Finish();
}

Plan DistortionLossBackward(int64_t rays, int64_t samples) {
  const DistortionLossParams params = {rays, samples};
  PlanBuilder b(kDistortionLossGradSlots);
  if (rays == 0) return b.Finish();
  b.Threads("distortion_loss", "distortion_loss_backward", static_cast<uint64_t>(rays))
      .Tensor(kDistortionLossGradGrad, kDistortionLossGradSlotGrad)
      .Tensor(kDistortionLossGradW, kDistortionLossGradSlotW)
      .Tensor(kDistortionLossGradT, kDistortionLossGradSlotT)
      .Output(kDistortionLossGradDw, kDistortionLossGradSlotDw)
      .Output(kDistortionLossGradDt, kDistortionLossGradSlotDt)
      .Value(kDistortionLossGradParams, params);
  return b.Finish();
}

}  // namespace metal_plan
}  // namespace mo
