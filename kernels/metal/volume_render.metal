// VolumeRender Metal shaders: one thread per ray (grid-stride), float32 only
// (MSL has no double). The arithmetic is kernels/common/volume_render.h.
// Invalid rays (negative/NaN sigma, decreasing t) get NaN outputs; the host
// glue does not wait for the GPU to report them (docs/VOLUME_RENDER.md).
#include "kernels/common/volume_render.h"

kernel void volume_render_forward_float32(device const float* sigma [[buffer(0)]],
                                          device const float* rgb [[buffer(1)]],
                                          device const float* t [[buffer(2)]],
                                          device const float* background [[buffer(3)]],
                                          device float* out_rgb [[buffer(4)]],
                                          device float* out_depth [[buffer(5)]],
                                          device float* out_opacity [[buffer(6)]],
                                          device float* weights [[buffer(7)]],
                                          constant mo::VolumeRenderParams& params [[buffer(8)]],
                                          uint gid [[thread_position_in_grid]],
                                          uint grid_size [[threads_per_grid]]) {
  const mo::int64 S = params.num_samples;
  const bool write_weights = params.write_weights != 0;
  for (mo::int64 r = gid; r < params.num_rays; r += grid_size) {
    mo::vr_forward_ray<float, mo::VrFloatMath>(
        sigma + r * S, rgb + r * S * 3, t + r * (S + 1), background + (params.background_per_ray ? r * 3 : 0), S,
        params.early_termination, out_rgb + r * 3, out_depth + r, out_opacity + r,
        write_weights ? weights + r * S : weights, write_weights);
  }
}

kernel void volume_render_backward_float32(device const float* sigma [[buffer(0)]],
                                           device const float* rgb [[buffer(1)]],
                                           device const float* t [[buffer(2)]],
                                           device const float* background [[buffer(3)]],
                                           device const float* out_rgb [[buffer(4)]],
                                           device const float* out_depth [[buffer(5)]],
                                           device const float* out_opacity [[buffer(6)]],
                                           device const float* weights [[buffer(7)]],
                                           device const float* grad_rgb [[buffer(8)]],
                                           device const float* grad_depth [[buffer(9)]],
                                           device const float* grad_opacity [[buffer(10)]],
                                           device const float* grad_weights [[buffer(11)]],
                                           device float* grad_sigma [[buffer(12)]],
                                           device float* grad_samples_rgb [[buffer(13)]],
                                           device float* grad_background [[buffer(14)]],
                                           constant mo::VolumeRenderParams& params [[buffer(15)]],
                                           uint gid [[thread_position_in_grid]],
                                           uint grid_size [[threads_per_grid]]) {
  const mo::int64 S = params.num_samples;
  const bool has_weight_grad = params.has_weight_grad != 0;
  for (mo::int64 r = gid; r < params.num_rays; r += grid_size) {
    mo::vr_backward_ray<float, mo::VrFloatMath>(
        sigma + r * S, rgb + r * S * 3, t + r * (S + 1), background + (params.background_per_ray ? r * 3 : 0), S,
        params.early_termination, out_rgb + r * 3, out_depth[r], out_opacity[r],
        has_weight_grad ? weights + r * S : weights, grad_rgb + r * 3, grad_depth[r], grad_opacity[r],
        has_weight_grad ? grad_weights + r * S : grad_weights, has_weight_grad, grad_sigma + r * S,
        grad_samples_rgb + r * S * 3, grad_background + r * 3);
  }
}
