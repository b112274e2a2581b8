// The CPU functor of MetalOpsRayMarch (the kernel class is
// kernels/ray_march_kernel.h): TF's intra-op thread pool, one ray per work item,
// counted in a first pass and written at its prefix-sum offset in a second.
// The march itself is kernels/common/ray_march.h. Each pass goes first to
// cpu::RunOnMetal (kernels/metal_plan/ray_march_plan.h): the count plan has
// completed, and its total is read here, before the kernel class allocates
// the samples and the fill plan runs.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>

#include "kernels/common/ray_march.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/metal_plan/ray_march_plan.h"
#include "kernels/ray_march_kernel.h"
#include "kernels/spec/ray_march_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

using ::tensorflow::OpKernelContext;

template <typename Work>
void ForEachRay(OpKernelContext* ctx, const RayMarchParams& p, const Work& work) {
  // About 60 operations per loop iteration; a ray takes up to max_samples
  // steps plus a few skips per cell it crosses.
  const int64_t iterations = std::min<int64_t>(p.max_iterations, p.max_samples + 3 * p.grid_resolution);
  cpu::ParallelFor(ctx, p.num_rays, 60 * iterations, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) work(static_cast<int32>(r));
  });
}

// The byte sizes of the op's inputs (the seed: its value, as the shaders read it).
struct InputBytes {
  uint64_t rays3, rays, occupancy;
};
InputBytes BytesOf(const RayMarchParams& p) {
  const uint64_t R = uint64_t(p.num_rays);
  return {R * 3 * sizeof(float), R * sizeof(float), uint64_t(p.cascades) * uint64_t(p.bytes_per_cascade)};
}

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <>
struct RayMarchFunctor<CPUDevice> {
  static absl::Status Count(OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                            int32_t* offsets, int32_t* counts, int64_t* total) {
    const InputBytes b = BytesOf(p);
    const int32_t seed = static_cast<int32_t>(in.seed);
    uint64_t metal_total = 0;
    absl::Status status;
    if (cpu::RunOnMetal(ctx, p.num_rays, [&] { return metal_plan::RayMarchCount(p); },
                        {cpu::Slot(in.origins, b.rays3), cpu::Slot(in.directions, b.rays3), cpu::Slot(in.near, b.rays),
                         cpu::Slot(in.far, b.rays), cpu::Slot(in.occupancy, b.occupancy), cpu::Slot(&seed, sizeof(seed)),
                         cpu::Slot(counts, b.rays), cpu::Slot(offsets, b.rays),
                         cpu::Slot(&metal_total, sizeof(metal_total))},
                        &status)) {
      *total = static_cast<int64_t>(metal_total);
      return status;
    }
    ForEachRay(ctx, p, [&](int32 r) {
      counts[r] = rm_march_ray(in, r, p, 0, RayMarchSamples{nullptr, nullptr, nullptr});
    });
    int64_t sum = 0;
    for (int64_t r = 0; r < p.num_rays; ++r) {
      offsets[r] = static_cast<int32_t>(std::min<int64_t>(sum, ray_march::kMaxIndex));
      sum += counts[r];
    }
    *total = sum;
    return absl::OkStatus();
  }

  static absl::Status Fill(OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                           const int32_t* offsets, int64_t total, float* t_starts, float* t_ends,
                           int32_t* ray_indices) {
    const InputBytes b = BytesOf(p);
    const int32_t seed = static_cast<int32_t>(in.seed);
    const uint64_t samples = uint64_t(total) * sizeof(float);
    absl::Status status;
    if (cpu::RunOnMetal(ctx, p.num_rays, [&] { return metal_plan::RayMarchFill(p); },
                        {cpu::Slot(in.origins, b.rays3), cpu::Slot(in.directions, b.rays3), cpu::Slot(in.near, b.rays),
                         cpu::Slot(in.far, b.rays), cpu::Slot(in.occupancy, b.occupancy), cpu::Slot(&seed, sizeof(seed)),
                         cpu::Slot(offsets, b.rays), cpu::Slot(t_starts, samples), cpu::Slot(t_ends, samples),
                         cpu::Slot(ray_indices, uint64_t(total) * sizeof(int32_t))},
                        &status)) {
      return status;
    }
    const RayMarchSamples out = {t_starts, t_ends, ray_indices};
    ForEachRay(ctx, p, [&](int32 r) { rm_march_ray(in, r, p, offsets[r], out); });
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarch").Device(::tensorflow::DEVICE_CPU), RayMarchOp<CPUDevice>);

}  // namespace mo
