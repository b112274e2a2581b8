// The CPU functor of MetalOpsPackedVolumeRender / ...Grad, its TensorFlow
// registrations (the kernel classes of packed_volume_render.h) and XLA's host
// handlers (kernels/xla/render_xla_host.h, for the calls
// packed_volume_render_xla.cc emits). Rays are split over the context's thread
// pool (cpu::ParallelFor); each ray runs the shared scalar drivers of
// packed_volume_render.h, the same functions the CUDA and Metal kernels run.
// float32 calls supply the op's Metal plans too (packed_volume_render_metal.cc),
// run where kernels/cpu/metal_offload.h sends the call: their validation
// passes leave the first invalid ray's check for the same error.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/common/volume_render_math.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/framework/render_op.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#define MO_TF_KERNEL  // packed_volume_render.h's kernel classes
#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/xla/render_xla_host.h"  // MO_XLA

namespace mo {
// Named (not anonymous): the functor's lambdas capture these types.
namespace packed_volume_render_cpu {

// The math policy: the float one every backend uses, std:: for double.
struct PvrDoubleMath {
  static double exp(double x) { return std::exp(x); }
  static double expm1(double x) { return std::expm1(x); }
};
template <typename T>
struct PvrMathFor {
  typedef VrFloatMath type;
};
template <>
struct PvrMathFor<double> {
  typedef PvrDoubleMath type;
};

// Cost of one ray for the thread-pool sharder (cycles, roughly): the mean
// sample count times VolumeRender's per-sample cost.
inline int64_t RayCost(int64_t rays, int64_t samples) { return 40 + 60 * (samples / (rays > 0 ? rays : 1)); }

// Runs ray(r) (a VrCheck) for every ray over the thread pool; the error of the
// first (smallest) failing ray, as packed_volume_render words it (none where
// a.validate is false: the failing rays' outputs are NaN).
template <typename Args, typename Ray>
absl::Status EachRay(const cpu::Context& ctx, const char* op, const Args& a, Ray ray) {
  std::mutex mutex;  // threads race only to lower the first bad ray
  int64_t bad_ray = std::numeric_limits<int64_t>::max();
  VrCheck bad = {kVrOk, 0};
  cpu::ParallelFor(ctx, a.rays, RayCost(a.rays, a.samples), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const VrCheck check = ray(r);
      if (check.code == kVrOk) continue;
      std::lock_guard<std::mutex> lock(mutex);
      if (r < bad_ray) {
        bad_ray = r;
        bad = check;
      }
    }
  });
  if (bad.code == kVrOk || !a.validate) return absl::OkStatus();  // invalid rays: NaN outputs
  return checks::ToStatus(
      packed_volume_render::BadRay(op, bad, bad_ray, a.samples, a.offsets, a.counts, a.sigma, a.t_starts, a.t_ends));
}

// The float32 plans; their status includes the validation passes' error.
struct RayBytes {
  uint64_t sample, sample3, ray, ray3, background, weights;
};
template <typename Args>
RayBytes BytesOf(const Args& a, bool weights) {
  const uint64_t R = uint64_t(a.rays), N = uint64_t(a.samples), f = sizeof(float);
  return {N * f, N * 3 * f, R * f, R * 3 * f, (a.background_per_ray ? R * 3 : 3) * f, weights ? N * f : 0};
}
template <typename Args>
metal_plan::PackedVolumeRenderLayout LayoutOf(const Args& a) {
  return {a.rays, a.samples, a.early_termination, a.background_per_ray};
}
// Runs build()'s plan on the rays' slots (the inputs, then out_rgb, depth and
// opacity), then `more`, then the check word of the validation passes, whose
// error the status then includes.
template <typename Args, typename BuildPlan>
cpu::OnMetal RunChecked(const cpu::MetalRoute& metal, const char* op, const Args& a, const RayBytes& b,
                        const BuildPlan& build, std::initializer_list<metal_plan::HostTensor> more) {
  PvrCheckResult check = {};
  const uint64_t layout_bytes = uint64_t(a.rays) * sizeof(int32_t);
  std::vector<metal_plan::HostTensor> slots = {
      cpu::Slot(a.sigma, b.sample),          cpu::Slot(a.rgb, b.sample3),          cpu::Slot(a.t_starts, b.sample),
      cpu::Slot(a.t_ends, b.sample),         cpu::Slot(a.offsets, layout_bytes),  cpu::Slot(a.counts, layout_bytes),
      cpu::Slot(a.background, b.background), cpu::Slot(a.out_rgb, b.ray3),        cpu::Slot(a.depth, b.ray),
      cpu::Slot(a.opacity, b.ray)};
  slots.insert(slots.end(), more);
  slots.push_back(cpu::Slot(&check, sizeof(check)));
  cpu::OnMetal status = metal.Run(a.samples + a.rays, build, slots);
  if (status.has_value() && status->ok() && a.validate) {
    *status = checks::ToStatus(packed_volume_render::BadCheck(op, check, a.samples));
  }
  return status;
}

inline cpu::OnMetal ForwardOnMetal(const cpu::MetalRoute& metal, const PackedVolumeRenderForwardArgs<float>& a) {
  const bool write_weights = a.weights != nullptr;
  const RayBytes b = BytesOf(a, write_weights);
  return RunChecked(
      metal, packed_volume_render::kForward, a, b,
      [&] { return metal_plan::PackedVolumeRenderForward(LayoutOf(a), write_weights); },
      {cpu::Slot(a.weights, b.weights)});
}

inline cpu::OnMetal BackwardOnMetal(const cpu::MetalRoute& metal, const PackedVolumeRenderBackwardArgs<float>& a) {
  const bool has_weight_grad = a.weights != nullptr && a.grad_weights != nullptr;
  const RayBytes b = BytesOf(a, has_weight_grad);
  return RunChecked(
      metal, packed_volume_render::kBackward, a, b,
      [&] { return metal_plan::PackedVolumeRenderBackward(LayoutOf(a), has_weight_grad); },
      {cpu::Slot(has_weight_grad ? a.weights : nullptr, b.weights), cpu::Slot(a.grad_rgb, b.ray3),
       cpu::Slot(a.grad_depth, b.ray), cpu::Slot(a.grad_opacity, b.ray),
       cpu::Slot(has_weight_grad ? a.grad_weights : nullptr, b.weights), cpu::Slot(a.grad_sigma, b.sample),
       cpu::Slot(a.grad_samples_rgb, b.sample3), cpu::Slot(a.grad_background, b.ray3)});
}

}  // namespace packed_volume_render_cpu

template <typename T>
struct PackedVolumeRenderFunctor<Eigen::ThreadPoolDevice, T> {
  typedef typename packed_volume_render_cpu::PvrMathFor<T>::type M;
  static constexpr bool kHasPlan = std::is_same<T, float>::value;

  static absl::Status Forward(cpu::Context ctx, const PackedVolumeRenderForwardArgs<T>& a) {
    return cpu::MetalOrCpu<kHasPlan>(
        ctx, [&](const auto& metal) { return packed_volume_render_cpu::ForwardOnMetal(metal, a); },
        [&] {
          return packed_volume_render_cpu::EachRay(ctx, packed_volume_render::kForward, a,
                                                   [&](int64_t r) { return pvr_forward_ray<T, M>(a, r); });
        });
  }

  static absl::Status Backward(cpu::Context ctx, const PackedVolumeRenderBackwardArgs<T>& a) {
    return cpu::MetalOrCpu<kHasPlan>(
        ctx, [&](const auto& metal) { return packed_volume_render_cpu::BackwardOnMetal(metal, a); },
        [&] {
          return packed_volume_render_cpu::EachRay(ctx, packed_volume_render::kBackward, a, [&](int64_t r) {
            return VrCheck{pvr_backward_ray<T, M>(a, r), 0};
          });
        });
  }
};

}  // namespace mo

MO_REGISTER_CPU_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsPackedVolumeRender", PackedVolumeRender, double);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls packed_volume_render_xla.cc emits.
MO_RENDER_HOST_HANDLERS(packed_volume_render, PackedVolumeRenderFunctor, PackedVolumeRenderForwardArgs,
                        PackedVolumeRenderBackwardArgs, ffi::AnyBuffer, ffi::AnyBuffer, ffi::AnyBuffer, ffi::AnyBuffer);
#endif  // MO_XLA
