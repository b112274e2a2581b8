// PackedVolumeRender CUDA launchers: plain C++ declarations (no TensorFlow),
// shared by the TF GPU kernels (packed_volume_render_gpu.cc) and the C-ABI harness.
#ifndef METAL_OPS_KERNELS_CUDA_PACKED_VOLUME_RENDER_H_
#define METAL_OPS_KERNELS_CUDA_PACKED_VOLUME_RENDER_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// Forward for R rays over N packed samples (one thread per ray): sigma [N],
// rgb [N,3], t_starts / t_ends [N], ray_offsets / ray_counts [R] (int32),
// background [3] or [R,3] (background_per_ray); writes out_rgb [R,3], depth
// [R], opacity [R] and, when weights != nullptr, weights [N]. Rays with an
// invalid layout or invalid samples get NaN outputs and, when bad_ray !=
// nullptr, atomically lower *bad_ray to the ray index; initialise it to
// UINT64_MAX.
template <typename T>
cudaError_t LaunchPackedVolumeRenderForward(const T* sigma, const T* rgb, const T* t_starts, const T* t_ends,
                                            const int32_t* ray_offsets, const int32_t* ray_counts,
                                            const T* background, bool background_per_ray, int64_t num_rays,
                                            int64_t num_samples, float early_termination, T* out_rgb, T* depth,
                                            T* opacity, T* weights, unsigned long long* bad_ray,
                                            cudaStream_t stream);

// Backward (VolumeRender's suffix trick per ray) from the inputs, the
// forward's per-ray outputs and the incoming gradients. weights /
// grad_weights are [N] or both nullptr. grad_background is per ray [R,3].
// Rays with an invalid layout lower *bad_ray (when not nullptr).
template <typename T>
cudaError_t LaunchPackedVolumeRenderBackward(const T* sigma, const T* rgb, const T* t_starts, const T* t_ends,
                                             const int32_t* ray_offsets, const int32_t* ray_counts,
                                             const T* background, bool background_per_ray, int64_t num_rays,
                                             int64_t num_samples, float early_termination, const T* out_rgb,
                                             const T* depth, const T* opacity, const T* weights, const T* grad_rgb,
                                             const T* grad_depth, const T* grad_opacity, const T* grad_weights,
                                             T* grad_sigma, T* grad_samples_rgb, T* grad_background,
                                             unsigned long long* bad_ray, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // METAL_OPS_KERNELS_CUDA_PACKED_VOLUME_RENDER_H_
