// VolumeRender CUDA kernels and the launchers volume_render.h declares: one
// thread per ray (64-bit grid-stride loop). The per-ray arithmetic is
// kernels/common/volume_render_math.h (VrWalk).
#include "kernels/volume_render/volume_render.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/render_math.h"

namespace mo {
namespace cuda {
namespace {

// The arguments arrive by value (a kernel parameter, under 4 KB).
template <typename T>
__global__ void VolumeRenderForwardKernel(const VolumeRenderForwardArgs<T> a, unsigned long long* bad_rays) {
  for (int64_t r = GlobalThreadIndex(); r < a.rays; r += GlobalThreadCount()) {
    const VrCheck check = vr_forward_ray<T, typename VrMathFor<T>::type>(a, r);
    if (check.code != kVrOk && bad_rays != nullptr) {
      atomicMin(bad_rays + (check.code == kVrBadSigma ? 0 : 1), static_cast<unsigned long long>(r));
    }
  }
}

template <typename T>
__global__ void VolumeRenderBackwardKernel(const VolumeRenderBackwardArgs<T> a) {
  for (int64_t r = GlobalThreadIndex(); r < a.rays; r += GlobalThreadCount()) {
    vr_backward_ray<T, typename VrMathFor<T>::type>(a, r);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchVolumeRenderForward(const VolumeRenderForwardArgs<T>& a, unsigned long long* bad_rays,
                                      cudaStream_t stream) {
  return LaunchPerRay(VolumeRenderForwardKernel<T>, a.rays, stream, a, bad_rays);
}

template <typename T>
cudaError_t LaunchVolumeRenderBackward(const VolumeRenderBackwardArgs<T>& a, cudaStream_t stream) {
  return LaunchPerRay(VolumeRenderBackwardKernel<T>, a.rays, stream, a);
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
