// VolumeRender Metal shaders: one thread per ray (grid-stride), float32 only
// (MSL has no double). The arithmetic is kernels/common/volume_render_math.h
// with the drivers of kernels/volume_render/volume_render.h; each shader
// gathers its buffers (indices named there) into the arguments struct
// the per-ray drivers take. Invalid rays (negative/NaN sigma, decreasing t)
// get NaN outputs; the host does not wait for the GPU to report them
// (docs/VOLUME_RENDER.md).
#include "kernels/volume_render/volume_render.h"

template <typename T>
[[kernel]] void volume_render_forward(device const T* sigma [[buffer(mo::kVrForwardSigma)]],
                                      device const T* rgb [[buffer(mo::kVrForwardRgb)]],
                                      device const T* t [[buffer(mo::kVrForwardT)]],
                                      device const T* background [[buffer(mo::kVrForwardBackground)]],
                                      device T* out_rgb [[buffer(mo::kVrForwardOutRgb)]],
                                      device T* out_depth [[buffer(mo::kVrForwardDepth)]],
                                      device T* out_opacity [[buffer(mo::kVrForwardOpacity)]],
                                      device T* weights [[buffer(mo::kVrForwardWeights)]],
                                      constant mo::VolumeRenderParams& params [[buffer(mo::kVrForwardParams)]],
                                      uint gid [[thread_position_in_grid]],
                                      uint grid_size [[threads_per_grid]]) {
  mo::VolumeRenderForwardArgs<T> a;
  mo::vr_set_render_args(params, &a);
  a.sigma = sigma;
  a.rgb = rgb;
  a.background = background;
  a.t = t;
  a.out_rgb = out_rgb;
  a.depth = out_depth;
  a.opacity = out_opacity;
  a.weights = params.write_weights != 0 ? weights : nullptr;
  for (mo::int64 r = gid; r < a.rays; r += grid_size) mo::vr_forward_ray<T, mo::VrFloatMath>(a, r);
}

template <typename T>
[[kernel]] void volume_render_backward(device const T* sigma [[buffer(mo::kVrBackwardSigma)]],
                                       device const T* rgb [[buffer(mo::kVrBackwardRgb)]],
                                       device const T* t [[buffer(mo::kVrBackwardT)]],
                                       device const T* background [[buffer(mo::kVrBackwardBackground)]],
                                       device const T* out_rgb [[buffer(mo::kVrBackwardOutRgb)]],
                                       device const T* out_depth [[buffer(mo::kVrBackwardDepth)]],
                                       device const T* out_opacity [[buffer(mo::kVrBackwardOpacity)]],
                                       device const T* weights [[buffer(mo::kVrBackwardWeights)]],
                                       device const T* grad_rgb [[buffer(mo::kVrBackwardGradRgb)]],
                                       device const T* grad_depth [[buffer(mo::kVrBackwardGradDepth)]],
                                       device const T* grad_opacity [[buffer(mo::kVrBackwardGradOpacity)]],
                                       device const T* grad_weights [[buffer(mo::kVrBackwardGradWeights)]],
                                       device T* grad_sigma [[buffer(mo::kVrBackwardGradSigma)]],
                                       device T* grad_samples_rgb [[buffer(mo::kVrBackwardGradSamplesRgb)]],
                                       device T* grad_background [[buffer(mo::kVrBackwardGradBackground)]],
                                       constant mo::VolumeRenderParams& params [[buffer(mo::kVrBackwardParams)]],
                                       uint gid [[thread_position_in_grid]],
                                       uint grid_size [[threads_per_grid]]) {
  const bool has_weight_grad = params.has_weight_grad != 0;
  mo::VolumeRenderBackwardArgs<T> a;
  mo::vr_set_render_args(params, &a);
  a.sigma = sigma;
  a.rgb = rgb;
  a.background = background;
  a.t = t;
  a.out_rgb = out_rgb;
  a.depth = out_depth;
  a.opacity = out_opacity;
  a.weights = has_weight_grad ? weights : nullptr;
  a.grad_rgb = grad_rgb;
  a.grad_depth = grad_depth;
  a.grad_opacity = grad_opacity;
  a.grad_weights = has_weight_grad ? grad_weights : nullptr;
  a.grad_sigma = grad_sigma;
  a.grad_samples_rgb = grad_samples_rgb;
  a.grad_background = grad_background;
  for (mo::int64 r = gid; r < a.rays; r += grid_size) mo::vr_backward_ray<T, mo::VrFloatMath>(a, r);
}

// The host names of the plans of kernels/volume_render/volume_render_metal.cc (float32 only).
template [[host_name("volume_render_forward_float32")]] [[kernel]] decltype(volume_render_forward<float>) volume_render_forward<float>;
template [[host_name("volume_render_backward_float32")]] [[kernel]] decltype(volume_render_backward<float>) volume_render_backward<float>;
