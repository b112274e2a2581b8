// VolumeRender CUDA launchers: plain C++ declarations (no TensorFlow) over the
// renderers' argument structs (kernels/common/render_args.h), shared by the TF GPU
// kernels (volume_render_gpu.cc) and the C-ABI harness.
#ifndef MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_CUDA_H_
#define MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/render_args.h"

namespace mo {
namespace cuda {

// Forward for R rays of S samples (one thread per ray; rays == 0 launches
// nothing): sigma [R,S], rgb [R,S,3], t [R,S+1], background [3] or [R,3];
// writes out_rgb [R,3], depth [R], opacity [R] and, when weights != nullptr,
// weights [R,S]. Invalid rays (sigma < 0 or NaN; t decreasing) get NaN
// outputs and, when bad_rays != nullptr, atomically lower bad_rays[0] (sigma)
// or bad_rays[1] (t) to the ray index; initialise both to UINT64_MAX.
template <typename T>
cudaError_t LaunchVolumeRenderForward(const VolumeRenderForwardArgs<T>& args, unsigned long long* bad_rays,
                                      cudaStream_t stream);

// Backward (suffix trick) from the inputs, the forward's per-ray outputs and
// the incoming gradients. weights / grad_weights are [R,S] or both nullptr.
// grad_background is per ray [R,3].
template <typename T>
cudaError_t LaunchVolumeRenderBackward(const VolumeRenderBackwardArgs<T>& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_CUDA_H_
