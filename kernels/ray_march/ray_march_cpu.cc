// RayMarch on the CPU: the TensorFlow kernels of MetalOpsRayMarch and
// MetalOpsRayMarchStatic (the kernel classes of ray_march.h over the CPU
// functor below) and XLA's host handler of MetalOpsRayMarchStatic, for the
// calls ray_march_xla.cc emits. The functor runs one ray per work item on the
// context's pool, counted in a first pass and written at its prefix-sum
// offset in a second; the march itself is ray_march.h's. Each pass supplies
// its Metal plan too (ray_march_metal.cc), run where kernels/cpu/metal_offload.h
// sends the call: the count plan has completed, and its total is read here,
// before the kernel class allocates the samples and the fill plan runs.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before ray_march.h: its kernel classes
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA; before ray_march.h: its XLA handlers' helpers
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // ray_march.h's kernel classes
#include "kernels/ray_march/ray_march.h"

namespace mo {
namespace ray_march_cpu {

// Rays [0, p.num_rays) over the pool. About 60 operations per loop
// iteration; a ray takes up to max_samples steps plus a few skips per cell it
// crosses.
template <typename Work>
void ForEachRay(const cpu::Context& ctx, const RayMarchParams& p, const Work& work) {
  const int64_t iterations = std::min<int64_t>(p.max_iterations, p.max_samples + 3 * p.grid_resolution);
  cpu::ParallelFor(ctx, p.num_rays, 60 * iterations, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) work(static_cast<int32>(r));
  });
}

// The byte sizes of the op's inputs (the seed: its value, as the shaders read it).
struct InputBytes {
  uint64_t rays3, rays, occupancy;
};
inline InputBytes BytesOf(const RayMarchParams& p) {
  const uint64_t R = uint64_t(p.num_rays);
  return {R * 3 * sizeof(float), R * sizeof(float), uint64_t(p.cascades) * uint64_t(p.bytes_per_cascade)};
}

}  // namespace ray_march_cpu
template <>
struct RayMarchFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Count(const cpu::Context& ctx, const RayMarchParams& p, const RayMarchInputs& in,
                            int32_t* offsets, int32_t* counts, int64_t* total) {
    const ray_march_cpu::InputBytes b = ray_march_cpu::BytesOf(p);
    const int32_t seed = static_cast<int32_t>(in.seed);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          uint64_t metal_total = 0;
          cpu::OnMetal status = metal.Run(
              p.num_rays, [&] { return metal_plan::RayMarchCount(p); },
              {cpu::Slot(in.origins, b.rays3), cpu::Slot(in.directions, b.rays3), cpu::Slot(in.near, b.rays),
               cpu::Slot(in.far, b.rays), cpu::Slot(in.occupancy, b.occupancy), cpu::Slot(&seed, sizeof(seed)),
               cpu::Slot(counts, b.rays), cpu::Slot(offsets, b.rays), cpu::Slot(&metal_total, sizeof(metal_total))});
          if (status.has_value()) *total = static_cast<int64_t>(metal_total);
          return status;
        },
        [&] {
          ray_march_cpu::ForEachRay(ctx, p, [&](int32 r) {
            counts[r] = rm_march_ray(in, r, p, 0, RayMarchSamples{nullptr, nullptr, nullptr});
          });
          int64_t sum = 0;
          for (int64_t r = 0; r < p.num_rays; ++r) {
            offsets[r] = static_cast<int32_t>(std::min<int64_t>(sum, ray_march::kMaxIndex));
            sum += counts[r];
          }
          *total = sum;
        });
  }

  static absl::Status Fill(const cpu::Context& ctx, const RayMarchParams& p, const RayMarchInputs& in,
                           const int32_t* offsets, int64_t total, float* t_starts, float* t_ends,
                           int32_t* ray_indices) {
    const ray_march_cpu::InputBytes b = ray_march_cpu::BytesOf(p);
    const int32_t seed = static_cast<int32_t>(in.seed);
    const uint64_t samples = uint64_t(total) * sizeof(float);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              p.num_rays, [&] { return metal_plan::RayMarchFill(p); },
              {cpu::Slot(in.origins, b.rays3), cpu::Slot(in.directions, b.rays3), cpu::Slot(in.near, b.rays),
               cpu::Slot(in.far, b.rays), cpu::Slot(in.occupancy, b.occupancy), cpu::Slot(&seed, sizeof(seed)),
               cpu::Slot(offsets, b.rays), cpu::Slot(t_starts, samples), cpu::Slot(t_ends, samples),
               cpu::Slot(ray_indices, uint64_t(total) * sizeof(int32_t))});
        },
        [&] {
          const RayMarchSamples out = {t_starts, t_ends, ray_indices};
          ray_march_cpu::ForEachRay(ctx, p, [&](int32 r) { rm_march_ray(in, r, p, offsets[r], out); });
        });
  }

  // RayMarchStatic: the march into outputs of sample_budget samples (see
  // RayMarchStaticOutputs).
  static absl::Status Static(const cpu::Context& ctx, const RayMarchParams& p, const RayMarchInputs& in,
                             int64_t sample_budget, const RayMarchStaticOutputs& out) {
    int64_t total = 0;
    if (p.num_rays > 0) {
      absl::Status status = Count(ctx, p, in, out.ray_offsets, out.ray_counts, &total);
      if (!status.ok()) return status;
    }
    // Whole rays in order while they fit; the rest get no samples.
    int64_t end = 0, kept = 0;
    for (; kept < p.num_rays && end + out.ray_counts[kept] <= sample_budget; ++kept) {
      out.ray_offsets[kept] = static_cast<int32_t>(end);
      end += out.ray_counts[kept];
    }
    for (int64_t r = kept; r < p.num_rays; ++r) {
      out.ray_offsets[r] = static_cast<int32_t>(end);
      out.ray_counts[r] = 0;
    }
    *out.num_samples = static_cast<int32_t>(end);
    *out.num_rays = static_cast<int32_t>(kept);
    if (kept > 0) {
      RayMarchParams fitted = p;
      fitted.num_rays = static_cast<int32>(kept);
      absl::Status status = Fill(ctx, fitted, in, out.ray_offsets, end, out.t_starts, out.t_ends, out.ray_indices);
      if (!status.ok()) return status;
    }
    const int32_t pad_ray = rm_static_pad_ray(p.num_rays);
    std::fill(out.t_starts + end, out.t_starts + sample_budget, 0.f);
    std::fill(out.t_ends + end, out.t_ends + sample_budget, 0.f);
    std::fill(out.ray_indices + end, out.ray_indices + sample_budget, pad_ray);
    return absl::OkStatus();
  }
};

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarch").Device(::tensorflow::DEVICE_CPU), RayMarchOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarchStatic").Device(::tensorflow::DEVICE_CPU),
                        RayMarchStaticOp<CPUDevice>);

}  // namespace mo

#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"

MO_XLA_FFI_ATTRS(::mo::ray_march::StaticAttrs);

// XLA's host handler of the same functor: the attributes bound whole
// (kernels/xla/xla_ffi.h), the buffers' shapes checked.
namespace mo::xla_kernels {
namespace {

using ray_march::StaticAttrs;

ffi::Error Static(ffi::AnyBuffer origins, ffi::AnyBuffer directions, ffi::AnyBuffer near, ffi::AnyBuffer far,
                  ffi::AnyBuffer occupancy, ffi::AnyBuffer seed, RetBuffer t_starts, RetBuffer t_ends,
                  RetBuffer ray_indices, RetBuffer ray_offsets, RetBuffer ray_counts, RetBuffer num_samples,
                  RetBuffer num_rays, StaticAttrs a) {
  ffi::Error error = xla_ffi::RayMarchStaticShapes(origins, directions, near, far, occupancy, seed, a);
  if (error.failure()) return error;
  const int64_t rays = origins.dimensions()[0];
  const RayMarchInputs in = xla_ffi::RayMarchInputsOf(origins, directions, near, far, occupancy,
                                                      static_cast<uint32_t>(*Data<int32_t>(seed)));
  const RayMarchStaticOutputs out = xla_ffi::RayMarchStaticOutputsOf(t_starts, t_ends, ray_indices, ray_offsets,
                                                                     ray_counts, num_samples, num_rays);
  return xla_ffi::ToError(RayMarchFunctor<Eigen::ThreadPoolDevice>::Static(
      HostContext(), ray_march::MakeParams(a, rays, occupancy.dimensions()[0]), in, a.sample_budget, out));
}

MO_XLA_FFI_HANDLER("MetalOpsRayMarchStatic", "Host", Static, xla_ffi::BindBuffers<6, 7>().Attrs<StaticAttrs>());

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
