// PackedVolumeRender CUDA kernels and the launchers packed_volume_render.h
// declares: one thread per ray (64-bit grid-stride loop). The per-ray
// arithmetic is kernels/packed_volume_render/packed_volume_render.h.
#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/render_math.h"

namespace mo {
namespace cuda {
namespace {

// The arguments arrive by value (a kernel parameter, under 4 KB).
template <typename T>
__global__ void PackedVolumeRenderForwardKernel(const PackedVolumeRenderForwardArgs<T> a,
                                                unsigned long long* bad_ray) {
  for (int64_t r = GlobalThreadIndex(); r < a.rays; r += GlobalThreadCount()) {
    const VrCheck check = pvr_forward_ray<T, typename VrMathFor<T>::type>(a, r);
    if (check.code != kVrOk && bad_ray != nullptr) atomicMin(bad_ray, static_cast<unsigned long long>(r));
  }
}

template <typename T>
__global__ void PackedVolumeRenderBackwardKernel(const PackedVolumeRenderBackwardArgs<T> a,
                                                 unsigned long long* bad_ray) {
  for (int64_t r = GlobalThreadIndex(); r < a.rays; r += GlobalThreadCount()) {
    const int32_t code = pvr_backward_ray<T, typename VrMathFor<T>::type>(a, r);
    if (code != kVrOk && bad_ray != nullptr) atomicMin(bad_ray, static_cast<unsigned long long>(r));
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchPackedVolumeRenderForward(const PackedVolumeRenderForwardArgs<T>& a, unsigned long long* bad_ray,
                                            cudaStream_t stream) {
  return LaunchPerRay(PackedVolumeRenderForwardKernel<T>, a.rays, stream, a, bad_ray);
}

template <typename T>
cudaError_t LaunchPackedVolumeRenderBackward(const PackedVolumeRenderBackwardArgs<T>& a, unsigned long long* bad_ray,
                                             cudaStream_t stream) {
  return LaunchPerRay(PackedVolumeRenderBackwardKernel<T>, a.rays, stream, a, bad_ray);
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
