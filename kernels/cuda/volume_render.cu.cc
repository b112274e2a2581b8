// VolumeRender CUDA kernels: one thread per ray (64-bit grid-stride loop).
// The per-ray arithmetic is kernels/common/volume_render.h (VrWalk).
#include "kernels/common/volume_render.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/vr_math.h"
#include "kernels/cuda/volume_render.h"

namespace mo {
namespace cuda {
namespace {

constexpr int kRayThreads = 128;

template <typename T>
__global__ void VolumeRenderForwardKernel(const T* __restrict__ sigma, const T* __restrict__ rgb,
                                          const T* __restrict__ t, const T* __restrict__ background,
                                          bool background_per_ray, int64_t R, int64_t S, T eps,
                                          T* __restrict__ out_rgb, T* __restrict__ depth, T* __restrict__ opacity,
                                          T* __restrict__ weights, unsigned long long* bad_rays) {
  const bool write_weights = weights != nullptr;
  for (int64_t r = GlobalThreadIndex(); r < R; r += GlobalThreadCount()) {
    const VrCheck check = vr_forward_ray<T, typename VrMathFor<T>::type>(
        sigma + r * S, rgb + r * S * 3, t + r * (S + 1), background + (background_per_ray ? r * 3 : 0), S, eps,
        out_rgb + r * 3, depth + r, opacity + r, write_weights ? weights + r * S : nullptr, write_weights);
    if (check.code != kVrOk && bad_rays != nullptr) {
      atomicMin(bad_rays + (check.code == kVrBadSigma ? 0 : 1), static_cast<unsigned long long>(r));
    }
  }
}

template <typename T>
__global__ void VolumeRenderBackwardKernel(const T* __restrict__ sigma, const T* __restrict__ rgb,
                                           const T* __restrict__ t, const T* __restrict__ background,
                                           bool background_per_ray, int64_t R, int64_t S, T eps,
                                           const T* __restrict__ out_rgb, const T* __restrict__ depth,
                                           const T* __restrict__ opacity, const T* __restrict__ weights,
                                           const T* __restrict__ grad_rgb, const T* __restrict__ grad_depth,
                                           const T* __restrict__ grad_opacity, const T* __restrict__ grad_weights,
                                           T* __restrict__ grad_sigma, T* __restrict__ grad_samples_rgb,
                                           T* __restrict__ grad_background) {
  const bool has_weight_grad = weights != nullptr && grad_weights != nullptr;
  for (int64_t r = GlobalThreadIndex(); r < R; r += GlobalThreadCount()) {
    vr_backward_ray<T, typename VrMathFor<T>::type>(
        sigma + r * S, rgb + r * S * 3, t + r * (S + 1), background + (background_per_ray ? r * 3 : 0), S, eps,
        out_rgb + r * 3, depth[r], opacity[r], has_weight_grad ? weights + r * S : nullptr, grad_rgb + r * 3,
        grad_depth[r], grad_opacity[r], has_weight_grad ? grad_weights + r * S : nullptr, has_weight_grad,
        grad_sigma + r * S, grad_samples_rgb + r * S * 3, grad_background + r * 3);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchVolumeRenderForward(const T* sigma, const T* rgb, const T* t, const T* background,
                                      bool background_per_ray, int64_t num_rays, int64_t num_samples,
                                      float early_termination, T* out_rgb, T* depth, T* opacity, T* weights,
                                      unsigned long long* bad_rays, cudaStream_t stream) {
  if (num_rays == 0) return cudaSuccess;
  VolumeRenderForwardKernel<T><<<GridStrideBlocks(num_rays, kRayThreads), kRayThreads, 0, stream>>>(
      sigma, rgb, t, background, background_per_ray, num_rays, num_samples, static_cast<T>(early_termination),
      out_rgb, depth, opacity, weights, bad_rays);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchVolumeRenderBackward(const T* sigma, const T* rgb, const T* t, const T* background,
                                       bool background_per_ray, int64_t num_rays, int64_t num_samples,
                                       float early_termination, const T* out_rgb, const T* depth,
                                       const T* opacity, const T* weights, const T* grad_rgb, const T* grad_depth,
                                       const T* grad_opacity, const T* grad_weights, T* grad_sigma,
                                       T* grad_samples_rgb, T* grad_background, cudaStream_t stream) {
  if (num_rays == 0) return cudaSuccess;
  VolumeRenderBackwardKernel<T><<<GridStrideBlocks(num_rays, kRayThreads), kRayThreads, 0, stream>>>(
      sigma, rgb, t, background, background_per_ray, num_rays, num_samples, static_cast<T>(early_termination),
      out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights, grad_sigma,
      grad_samples_rgb, grad_background);
  return cudaGetLastError();
}

#define METAL_OPS_INSTANTIATE_VOLUME_RENDER(T)                                                              \
  template cudaError_t LaunchVolumeRenderForward<T>(const T*, const T*, const T*, const T*, bool, int64_t,   \
                                                    int64_t, float, T*, T*, T*, T*, unsigned long long*,     \
                                                    cudaStream_t);                                           \
  template cudaError_t LaunchVolumeRenderBackward<T>(const T*, const T*, const T*, const T*, bool, int64_t,  \
                                                     int64_t, float, const T*, const T*, const T*, const T*, \
                                                     const T*, const T*, const T*, const T*, T*, T*, T*,     \
                                                     cudaStream_t);
METAL_OPS_INSTANTIATE_VOLUME_RENDER(float)
METAL_OPS_INSTANTIATE_VOLUME_RENDER(double)
#undef METAL_OPS_INSTANTIATE_VOLUME_RENDER

}  // namespace cuda
}  // namespace mo
