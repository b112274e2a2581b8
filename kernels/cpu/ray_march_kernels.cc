// The CPU functor of MetalOpsRayMarch (the kernel class is
// kernels/ray_march_kernel.h): TF's intra-op thread pool, one ray per work item,
// counted in a first pass and written at its prefix-sum offset in a second.
// The march itself is kernels/common/ray_march.h.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>

#include "kernels/common/ray_march.h"
#include "kernels/cpu/thread_pool.h"
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

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <>
struct RayMarchFunctor<CPUDevice> {
  static absl::Status Count(OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                            int32_t* offsets, int32_t* counts, int64_t* total) {
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
                           const int32_t* offsets, float* t_starts, float* t_ends, int32_t* ray_indices) {
    const RayMarchSamples out = {t_starts, t_ends, ray_indices};
    ForEachRay(ctx, p, [&](int32 r) { rm_march_ray(in, r, p, offsets[r], out); });
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarch").Device(::tensorflow::DEVICE_CPU), RayMarchOp<CPUDevice>);

}  // namespace mo
