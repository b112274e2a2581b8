// PackedVolumeRender CUDA kernels: one thread per ray (64-bit grid-stride
// loop). The per-ray arithmetic is kernels/common/packed_volume_render.h.
#include "kernels/common/packed_volume_render.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/packed_volume_render.h"
#include "kernels/cuda/vr_math.h"

namespace mo {
namespace cuda {
namespace {

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
cudaError_t LaunchPackedVolumeRenderForward(const PackedVolumeRenderForwardArgs<T>& a, unsigned long long* bad_ray,
                                            cudaStream_t stream) {
  return LaunchPerRay(PackedVolumeRenderForwardKernel<T>, a.rays, stream, a.sigma, a.rgb, a.t_starts, a.t_ends,
                      a.offsets, a.counts, a.background, a.background_per_ray, a.rays, a.samples,
                      static_cast<T>(a.early_termination), a.out_rgb, a.depth, a.opacity, a.weights, bad_ray);
}

template <typename T>
cudaError_t LaunchPackedVolumeRenderBackward(const PackedVolumeRenderBackwardArgs<T>& a, unsigned long long* bad_ray,
                                             cudaStream_t stream) {
  return LaunchPerRay(PackedVolumeRenderBackwardKernel<T>, a.rays, stream, a.sigma, a.rgb, a.t_starts, a.t_ends,
                      a.offsets, a.counts, a.background, a.background_per_ray, a.rays, a.samples,
                      static_cast<T>(a.early_termination), a.out_rgb, a.depth, a.opacity, a.weights, a.grad_rgb,
                      a.grad_depth, a.grad_opacity, a.grad_weights, a.grad_sigma, a.grad_samples_rgb,
                      a.grad_background, bad_ray);
}

#define MO_INSTANTIATE_PACKED_VOLUME_RENDER(T)                                                        \
  template cudaError_t LaunchPackedVolumeRenderForward<T>(const PackedVolumeRenderForwardArgs<T>&,           \
                                                          unsigned long long*, cudaStream_t);                \
  template cudaError_t LaunchPackedVolumeRenderBackward<T>(const PackedVolumeRenderBackwardArgs<T>&,         \
                                                           unsigned long long*, cudaStream_t);

MO_INSTANTIATE_PACKED_VOLUME_RENDER(float)
MO_INSTANTIATE_PACKED_VOLUME_RENDER(double)
#undef MO_INSTANTIATE_PACKED_VOLUME_RENDER

}  // namespace cuda
}  // namespace mo
