// PackedVolumeRender CUDA kernels: one thread per ray (64-bit grid-stride
// loop). The per-ray arithmetic is kernels/common/packed_volume_render.h.
#include "kernels/common/packed_volume_render.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/packed_volume_render.h"
#include "kernels/cuda/vr_math.h"

namespace mo {
namespace cuda {
namespace {

constexpr int kRayThreads = 128;

template <typename T>
__global__ void PackedVolumeRenderForwardKernel(const T* __restrict__ sigma, const T* __restrict__ rgb,
                                                const T* __restrict__ t_starts, const T* __restrict__ t_ends,
                                                const int32_t* __restrict__ offsets, const int32_t* __restrict__ counts,
                                                const T* __restrict__ background, bool background_per_ray, int64_t R,
                                                int64_t N, T eps, T* __restrict__ out_rgb, T* __restrict__ depth,
                                                T* __restrict__ opacity, T* __restrict__ weights,
                                                unsigned long long* bad_ray) {
  for (int64_t r = GlobalThreadIndex(); r < R; r += GlobalThreadCount()) {
    const VrCheck check = pvr_forward_ray<T, typename VrMathFor<T>::type>(
        sigma, rgb, t_starts, t_ends, offsets, counts, background, background_per_ray, r, R, N, eps, out_rgb, depth,
        opacity, weights, weights != nullptr);
    if (check.code != kVrOk && bad_ray != nullptr) atomicMin(bad_ray, static_cast<unsigned long long>(r));
  }
}

template <typename T>
__global__ void PackedVolumeRenderBackwardKernel(
    const T* __restrict__ sigma, const T* __restrict__ rgb, const T* __restrict__ t_starts,
    const T* __restrict__ t_ends, const int32_t* __restrict__ offsets, const int32_t* __restrict__ counts,
    const T* __restrict__ background, bool background_per_ray, int64_t R, int64_t N, T eps,
    const T* __restrict__ out_rgb, const T* __restrict__ depth, const T* __restrict__ opacity,
    const T* __restrict__ weights, const T* __restrict__ grad_rgb, const T* __restrict__ grad_depth,
    const T* __restrict__ grad_opacity, const T* __restrict__ grad_weights, T* __restrict__ grad_sigma,
    T* __restrict__ grad_samples_rgb, T* __restrict__ grad_background, unsigned long long* bad_ray) {
  const bool has_weight_grad = weights != nullptr && grad_weights != nullptr;
  for (int64_t r = GlobalThreadIndex(); r < R; r += GlobalThreadCount()) {
    const int32_t code = pvr_backward_ray<T, typename VrMathFor<T>::type>(
        sigma, rgb, t_starts, t_ends, offsets, counts, background, background_per_ray, r, R, N, eps, out_rgb, depth,
        opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights, has_weight_grad, grad_sigma,
        grad_samples_rgb, grad_background);
    if (code != kVrOk && bad_ray != nullptr) atomicMin(bad_ray, static_cast<unsigned long long>(r));
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchPackedVolumeRenderForward(const T* sigma, const T* rgb, const T* t_starts, const T* t_ends,
                                            const int32_t* ray_offsets, const int32_t* ray_counts,
                                            const T* background, bool background_per_ray, int64_t num_rays,
                                            int64_t num_samples, float early_termination, T* out_rgb, T* depth,
                                            T* opacity, T* weights, unsigned long long* bad_ray,
                                            cudaStream_t stream) {
  if (num_rays == 0) return cudaSuccess;
  PackedVolumeRenderForwardKernel<T><<<GridStrideBlocks(num_rays, kRayThreads), kRayThreads, 0, stream>>>(
      sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background, background_per_ray, num_rays, num_samples,
      static_cast<T>(early_termination), out_rgb, depth, opacity, weights, bad_ray);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchPackedVolumeRenderBackward(const T* sigma, const T* rgb, const T* t_starts, const T* t_ends,
                                             const int32_t* ray_offsets, const int32_t* ray_counts,
                                             const T* background, bool background_per_ray, int64_t num_rays,
                                             int64_t num_samples, float early_termination, const T* out_rgb,
                                             const T* depth, const T* opacity, const T* weights, const T* grad_rgb,
                                             const T* grad_depth, const T* grad_opacity, const T* grad_weights,
                                             T* grad_sigma, T* grad_samples_rgb, T* grad_background,
                                             unsigned long long* bad_ray, cudaStream_t stream) {
  if (num_rays == 0) return cudaSuccess;
  PackedVolumeRenderBackwardKernel<T><<<GridStrideBlocks(num_rays, kRayThreads), kRayThreads, 0, stream>>>(
      sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background, background_per_ray, num_rays, num_samples,
      static_cast<T>(early_termination), out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity,
      grad_weights, grad_sigma, grad_samples_rgb, grad_background, bad_ray);
  return cudaGetLastError();
}

#define METAL_OPS_INSTANTIATE_PACKED_VOLUME_RENDER(T)                                                              \
  template cudaError_t LaunchPackedVolumeRenderForward<T>(const T*, const T*, const T*, const T*, const int32_t*,  \
                                                          const int32_t*, const T*, bool, int64_t, int64_t, float, \
                                                          T*, T*, T*, T*, unsigned long long*, cudaStream_t);      \
  template cudaError_t LaunchPackedVolumeRenderBackward<T>(                                                        \
      const T*, const T*, const T*, const T*, const int32_t*, const int32_t*, const T*, bool, int64_t, int64_t,    \
      float, const T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*,           \
      unsigned long long*, cudaStream_t);

METAL_OPS_INSTANTIATE_PACKED_VOLUME_RENDER(float)
METAL_OPS_INSTANTIATE_PACKED_VOLUME_RENDER(double)
#undef METAL_OPS_INSTANTIATE_PACKED_VOLUME_RENDER

}  // namespace cuda
}  // namespace mo
