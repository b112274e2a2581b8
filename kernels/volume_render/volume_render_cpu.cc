// The CPU functor of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad, its
// TensorFlow registrations (the kernel classes of volume_render.h) and XLA's
// host handlers (kernels/xla/render_xla_host.h, for the calls
// volume_render_xla.cc emits), on a cpu::Context.
// Rays are split over the context's thread pool. Each ray runs in
// three phases so the transcendental functions vectorise along the ray:
//   A (sequential adds): tau_i and the exclusive prefix sums cum_i,
//   B (SIMD, Eigen packets): alpha_i = vr_alpha(tau_i), T_i = vr_transmittance(cum_i),
//   C (sequential): K (early termination), then the sums / the suffix-trick
//     backward.
// Every formula is a function of kernels/common/volume_render_math.h; the GPU
// backends run the same functions one sample at a time (VrWalk). float32
// calls supply the op's Metal plans too (volume_render_metal.cc), run where
// kernels/cpu/metal_offload.h sends the call: their shaders give invalid rays
// NaN outputs, and the host then names the first invalid ray, as here.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/framework/render_op.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#define MO_CPU_BODIES  // volume_render.h's CPU bodies
#define MO_TF_KERNEL   // volume_render.h's kernel classes
#include "kernels/volume_render/volume_render.h"
#include "kernels/xla/render_xla_host.h"  // MO_XLA

namespace mo {
namespace volume_render_cpu {

// Cost of one ray for the thread-pool sharder (cycles, roughly).
inline int64_t RayCost(int64_t samples) { return 20 + 60 * samples; }

// The byte sizes of the ray tensors: sigma [R, S], rgb [R, S, 3], t [R, S + 1],
// background [R, 3] or [3], per-ray [R] and [R, 3].
struct RayBytes {
  uint64_t sigma, rgb, t, background, ray, ray3;
};
inline RayBytes BytesOf(const RenderArgs<float>& a) {
  const uint64_t R = static_cast<uint64_t>(a.rays), S = static_cast<uint64_t>(a.samples), f = sizeof(float);
  return {R * S * f, R * S * 3 * f, R * (S + 1) * f, (a.background_per_ray ? R * 3 : 3) * f, R * f, R * 3 * f};
}
inline metal_plan::VolumeRenderLayout LayoutOf(const RenderArgs<float>& a) {
  return {a.rays, a.samples, a.early_termination, a.background_per_ray};
}

// The op's error for the first invalid ray (negative / NaN sigma, decreasing
// t), or OK.
inline absl::Status CheckRays(const cpu::Context& ctx, const VolumeRenderForwardArgs<float>& a) {
  const int64_t S = a.samples;
  std::atomic<int64_t> first_bad(a.rays);
  cpu::ParallelFor(ctx, a.rays, 4 * S + 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end && r < first_bad.load(std::memory_order_relaxed); ++r) {
      if (!AllValid(a.sigma + r * S, a.t + r * (S + 1), S)) {
        int64_t cur = first_bad.load();
        while (r < cur && !first_bad.compare_exchange_weak(cur, r)) {
        }
        return;
      }
    }
  });
  const int64_t r = first_bad.load();
  if (r == a.rays) return absl::OkStatus();
  const float* sigma_r = a.sigma + r * S;
  const float* t_r = a.t + r * (S + 1);
  return checks::ToStatus(volume_render::BadRay(vr_check_ray(sigma_r, t_r, S), r, sigma_r, t_r));
}

// The float32 plans.
inline cpu::OnMetal ForwardOnMetal(const cpu::Context& ctx, const cpu::MetalRoute& metal,
                                   const VolumeRenderForwardArgs<float>& a) {
  const RayBytes b = BytesOf(a);
  const bool write_weights = a.weights != nullptr;
  cpu::OnMetal status = metal.Run(
      a.rays * a.samples, [&] { return metal_plan::VolumeRenderForward(LayoutOf(a), write_weights); },
      {cpu::Slot(a.sigma, b.sigma), cpu::Slot(a.rgb, b.rgb), cpu::Slot(a.t, b.t), cpu::Slot(a.background, b.background),
       cpu::Slot(a.out_rgb, b.ray3), cpu::Slot(a.depth, b.ray), cpu::Slot(a.opacity, b.ray),
       cpu::Slot(a.weights, write_weights ? b.sigma : 0)});
  if (status.has_value() && status->ok() && a.validate) *status = CheckRays(ctx, a);
  return status;
}
inline cpu::OnMetal BackwardOnMetal(const cpu::MetalRoute& metal, const VolumeRenderBackwardArgs<float>& a) {
  const RayBytes b = BytesOf(a);
  const bool has_weight_grad = a.weights != nullptr;
  const uint64_t weights = has_weight_grad ? b.sigma : 0;
  return metal.Run(
      a.rays * a.samples, [&] { return metal_plan::VolumeRenderBackward(LayoutOf(a), has_weight_grad); },
      {cpu::Slot(a.sigma, b.sigma), cpu::Slot(a.rgb, b.rgb), cpu::Slot(a.t, b.t), cpu::Slot(a.background, b.background),
       cpu::Slot(a.out_rgb, b.ray3), cpu::Slot(a.depth, b.ray), cpu::Slot(a.opacity, b.ray),
       cpu::Slot(a.weights, weights), cpu::Slot(a.grad_rgb, b.ray3), cpu::Slot(a.grad_depth, b.ray),
       cpu::Slot(a.grad_opacity, b.ray), cpu::Slot(a.grad_weights, weights), cpu::Slot(a.grad_sigma, b.sigma),
       cpu::Slot(a.grad_samples_rgb, b.rgb), cpu::Slot(a.grad_background, b.ray3)});
}

}  // namespace volume_render_cpu

template <typename T>
struct VolumeRenderFunctor<Eigen::ThreadPoolDevice, T> {
  static constexpr bool kHasPlan = std::is_same<T, float>::value;

  static absl::Status Forward(cpu::Context ctx, const VolumeRenderForwardArgs<T>& a) {
    return cpu::MetalOrCpu<kHasPlan>(
        ctx, [&](const auto& metal) { return volume_render_cpu::ForwardOnMetal(ctx, metal, a); },
        [&] { return ForwardOnCpu(ctx, a); });
  }

  static absl::Status Backward(cpu::Context ctx, const VolumeRenderBackwardArgs<T>& a) {
    return cpu::MetalOrCpu<kHasPlan>(
        ctx, [&](const auto& metal) { return volume_render_cpu::BackwardOnMetal(metal, a); },
        [&] {
          using namespace volume_render_cpu;  // NOLINT: the per-ray bodies
          cpu::ParallelFor(ctx, a.rays, RayCost(a.samples), [&](int64_t begin, int64_t end) {
            RayScratch<T> scratch(a.samples);
            for (int64_t r = begin; r < end; ++r) BackwardRay(&scratch, a, r);
          });
        });
  }

 private:
  static absl::Status ForwardOnCpu(const cpu::Context& ctx, const VolumeRenderForwardArgs<T>& a) {
    using namespace volume_render_cpu;  // NOLINT: the per-ray bodies
    const int64_t S = a.samples;
    const bool write_weights = a.weights != nullptr;
    // The smallest invalid ray (if any) is reported; threads race only to lower it.
    std::mutex error_mutex;
    int64_t bad_ray = std::numeric_limits<int64_t>::max();
    VrCheck bad_check = {kVrOk, 0};
    cpu::ParallelFor(ctx, a.rays, RayCost(S), [&](int64_t begin, int64_t end) {
      RayScratch<T> scratch(S);
      for (int64_t r = begin; r < end; ++r) {
        const T* sigma_r = a.sigma + r * S;
        const T* t_r = a.t + r * (S + 1);
        T* out_rgb_r = a.out_rgb + r * 3;
        T* weights_r = write_weights ? a.weights + r * S : nullptr;
        if (!AllValid(sigma_r, t_r, S)) {
          const VrCheck check = vr_check_ray(sigma_r, t_r, S);
          vr_write_invalid(out_rgb_r, a.depth + r, a.opacity + r, weights_r, S, write_weights);
          std::lock_guard<std::mutex> lock(error_mutex);
          if (r < bad_ray) {
            bad_ray = r;
            bad_check = check;
          }
          continue;
        }
        ForwardRay(&scratch, a, r);
      }
    });
    if (bad_check.code == kVrOk || !a.validate) return absl::OkStatus();  // invalid rays: NaN outputs
    return checks::ToStatus(volume_render::BadRay(bad_check, bad_ray, a.sigma + bad_ray * S, a.t + bad_ray * (S + 1)));
  }
};

}  // namespace mo

MO_REGISTER_CPU_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, double);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls volume_render_xla.cc emits.
MO_RENDER_HOST_HANDLERS(volume_render, VolumeRenderFunctor, VolumeRenderForwardArgs, VolumeRenderBackwardArgs,
                        ffi::AnyBuffer);
#endif  // MO_XLA
