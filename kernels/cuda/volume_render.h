// VolumeRender CUDA launchers: plain C++ declarations (no TensorFlow), shared
// by the TF GPU kernels (volume_render_gpu.cc) and the C-ABI harness.
#ifndef METAL_OPS_KERNELS_CUDA_VOLUME_RENDER_H_
#define METAL_OPS_KERNELS_CUDA_VOLUME_RENDER_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// Forward for R rays of S samples (one thread per ray): sigma [R,S], rgb
// [R,S,3], t [R,S+1], background [3] or [R,3] (background_per_ray); writes
// out_rgb [R,3], depth [R], opacity [R] and, when weights != nullptr, weights
// [R,S]. Invalid rays (sigma < 0 or NaN; t decreasing) get NaN outputs and,
// when bad_rays != nullptr, atomically lower bad_rays[0] (sigma) or
// bad_rays[1] (t) to the ray index; initialise both to UINT64_MAX.
template <typename T>
cudaError_t LaunchVolumeRenderForward(const T* sigma, const T* rgb, const T* t, const T* background,
                                      bool background_per_ray, int64_t num_rays, int64_t num_samples,
                                      float early_termination, T* out_rgb, T* depth, T* opacity, T* weights,
                                      unsigned long long* bad_rays, cudaStream_t stream);

// Backward (suffix trick) from the inputs, the forward's per-ray outputs and
// the incoming gradients. weights / grad_weights are [R,S] or both nullptr.
// grad_background is per ray [R,3].
template <typename T>
cudaError_t LaunchVolumeRenderBackward(const T* sigma, const T* rgb, const T* t, const T* background,
                                       bool background_per_ray, int64_t num_rays, int64_t num_samples,
                                       float early_termination, const T* out_rgb, const T* depth,
                                       const T* opacity, const T* weights, const T* grad_rgb, const T* grad_depth,
                                       const T* grad_opacity, const T* grad_weights, T* grad_sigma,
                                       T* grad_samples_rgb, T* grad_background, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // METAL_OPS_KERNELS_CUDA_VOLUME_RENDER_H_
