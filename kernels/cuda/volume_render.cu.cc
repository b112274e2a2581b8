// VolumeRender CUDA kernels: one thread per ray (64-bit grid-stride loop).
// The per-ray arithmetic is kernels/common/volume_render.h (VrWalk).
#include "kernels/common/volume_render.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/vr_math.h"
#include "kernels/cuda/volume_render.h"

namespace mo {
namespace cuda {
namespace {

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
cudaError_t LaunchVolumeRenderForward(const VolumeRenderForwardArgs<T>& a, unsigned long long* bad_rays,
                                      cudaStream_t stream) {
  return LaunchPerRay(VolumeRenderForwardKernel<T>, a.rays, stream, a.sigma, a.rgb, a.t, a.background,
                      a.background_per_ray, a.rays, a.samples, static_cast<T>(a.early_termination), a.out_rgb,
                      a.depth, a.opacity, a.weights, bad_rays);
}

template <typename T>
cudaError_t LaunchVolumeRenderBackward(const VolumeRenderBackwardArgs<T>& a, cudaStream_t stream) {
  return LaunchPerRay(VolumeRenderBackwardKernel<T>, a.rays, stream, a.sigma, a.rgb, a.t, a.background,
                      a.background_per_ray, a.rays, a.samples, static_cast<T>(a.early_termination), a.out_rgb,
                      a.depth, a.opacity, a.weights, a.grad_rgb, a.grad_depth, a.grad_opacity, a.grad_weights,
                      a.grad_sigma, a.grad_samples_rgb, a.grad_background);
}

#define MO_INSTANTIATE_VOLUME_RENDER(T)                                                                    \
  template cudaError_t LaunchVolumeRenderForward<T>(const VolumeRenderForwardArgs<T>&, unsigned long long*,        \
                                                    cudaStream_t);                                                 \
  template cudaError_t LaunchVolumeRenderBackward<T>(const VolumeRenderBackwardArgs<T>&, cudaStream_t);
MO_INSTANTIATE_VOLUME_RENDER(float)
MO_INSTANTIATE_VOLUME_RENDER(double)
#undef MO_INSTANTIATE_VOLUME_RENDER

}  // namespace cuda
}  // namespace mo
