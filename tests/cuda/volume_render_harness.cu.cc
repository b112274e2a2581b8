// C-ABI entry points for testing the VolumeRender CUDA kernels without
// TensorFlow (tests/cuda/test_volume_render_cuda.py, through ctypes + CuPy).
#include "kernels/volume_render/volume_render.h"

#define MO_VOLUME_RENDER_HARNESS(SUFFIX, T)                                                             \
  int metal_ops_volume_render_forward_##SUFFIX(const T* sigma, const T* rgb, const T* t, const T* background,  \
                                               int32_t background_per_ray, int64_t num_rays,                  \
                                               int64_t num_samples, float early_termination, T* out_rgb,      \
                                               T* depth, T* opacity, T* weights, unsigned long long* bad_rays, \
                                               cudaStream_t stream) {                                         \
    const mo::VolumeRenderForwardArgs<T> args = {                                                             \
        {num_rays, num_samples, background_per_ray != 0, early_termination, sigma, rgb, background},          \
        {t},                                                                                                  \
        {out_rgb, depth, opacity, weights}};                                                                  \
    return static_cast<int>(mo::cuda::LaunchVolumeRenderForward<T>(args, bad_rays, stream));                  \
  }                                                                                                           \
  int metal_ops_volume_render_backward_##SUFFIX(                                                               \
      const T* sigma, const T* rgb, const T* t, const T* background, int32_t background_per_ray,              \
      int64_t num_rays, int64_t num_samples, float early_termination, const T* out_rgb, const T* depth,       \
      const T* opacity, const T* weights, const T* grad_rgb, const T* grad_depth, const T* grad_opacity,      \
      const T* grad_weights, T* grad_sigma, T* grad_samples_rgb, T* grad_background, cudaStream_t stream) {    \
    const mo::VolumeRenderBackwardArgs<T> args = {                                                            \
        {num_rays, num_samples, background_per_ray != 0, early_termination, sigma, rgb, background},          \
        {t},                                                                                                  \
        {out_rgb, depth, opacity, weights, grad_rgb, grad_depth, grad_opacity, grad_weights, grad_sigma,      \
         grad_samples_rgb, grad_background}};                                                                 \
    return static_cast<int>(mo::cuda::LaunchVolumeRenderBackward<T>(args, stream));                          \
  }

extern "C" {
MO_VOLUME_RENDER_HARNESS(float32, float)
MO_VOLUME_RENDER_HARNESS(float64, double)
}  // extern "C"

#undef MO_VOLUME_RENDER_HARNESS
