// PackedVolumeRender CUDA launchers: plain C++ declarations (no TensorFlow)
// over the renderers' argument structs (kernels/common/render_args.h), shared by the
// TF GPU kernels (packed_volume_render_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_CUDA_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/render_args.h"

namespace mo {
namespace cuda {

// Forward for R rays over N packed samples (one thread per ray; rays == 0
// launches nothing): sigma [N], rgb [N,3], t_starts / t_ends [N], offsets /
// counts [R] (int32), background [3] or [R,3]; writes out_rgb [R,3], depth
// [R], opacity [R] and, when weights != nullptr, weights [N]. Rays with an
// invalid layout or invalid samples get NaN outputs and, when bad_ray !=
// nullptr, atomically lower *bad_ray to the ray index; initialise it to
// UINT64_MAX.
template <typename T>
cudaError_t LaunchPackedVolumeRenderForward(const PackedVolumeRenderForwardArgs<T>& args, unsigned long long* bad_ray,
                                            cudaStream_t stream);

// Backward (VolumeRender's suffix trick per ray) from the inputs, the
// forward's per-ray outputs and the incoming gradients. weights /
// grad_weights are [N] or both nullptr. grad_background is per ray [R,3].
// Rays with an invalid layout lower *bad_ray (when not nullptr).
template <typename T>
cudaError_t LaunchPackedVolumeRenderBackward(const PackedVolumeRenderBackwardArgs<T>& args, unsigned long long* bad_ray,
                                             cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_CUDA_H_
