// PackedVolumeRender Metal shaders: one thread per ray (grid-stride), float32
// only (MSL has no double). The arithmetic is kernels/common/packed_volume_render.h
// (on volume_render.h). Rays with an invalid layout or invalid samples get NaN
// outputs; the host glue does not wait for the GPU to report them
// (docs/PACKED_VOLUME_RENDER.md).
#include "kernels/common/packed_volume_render.h"

kernel void packed_volume_render_forward_float32(device const float* sigma [[buffer(0)]],
                                                 device const float* rgb [[buffer(1)]],
                                                 device const float* t_starts [[buffer(2)]],
                                                 device const float* t_ends [[buffer(3)]],
                                                 device const int* ray_offsets [[buffer(4)]],
                                                 device const int* ray_counts [[buffer(5)]],
                                                 device const float* background [[buffer(6)]],
                                                 device float* out_rgb [[buffer(7)]],
                                                 device float* out_depth [[buffer(8)]],
                                                 device float* out_opacity [[buffer(9)]],
                                                 device float* weights [[buffer(10)]],
                                                 constant mo::VolumeRenderParams& params [[buffer(11)]],
                                                 uint gid [[thread_position_in_grid]],
                                                 uint grid_size [[threads_per_grid]]) {
  for (mo::int64 r = gid; r < params.num_rays; r += grid_size) {
    mo::pvr_forward_ray<float, mo::VrFloatMath>(sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background,
                                                params.background_per_ray != 0, r, params.num_rays,
                                                params.num_samples, params.early_termination, out_rgb, out_depth,
                                                out_opacity, weights, params.write_weights != 0);
  }
}

kernel void packed_volume_render_backward_float32(device const float* sigma [[buffer(0)]],
                                                  device const float* rgb [[buffer(1)]],
                                                  device const float* t_starts [[buffer(2)]],
                                                  device const float* t_ends [[buffer(3)]],
                                                  device const int* ray_offsets [[buffer(4)]],
                                                  device const int* ray_counts [[buffer(5)]],
                                                  device const float* background [[buffer(6)]],
                                                  device const float* out_rgb [[buffer(7)]],
                                                  device const float* out_depth [[buffer(8)]],
                                                  device const float* out_opacity [[buffer(9)]],
                                                  device const float* weights [[buffer(10)]],
                                                  device const float* grad_rgb [[buffer(11)]],
                                                  device const float* grad_depth [[buffer(12)]],
                                                  device const float* grad_opacity [[buffer(13)]],
                                                  device const float* grad_weights [[buffer(14)]],
                                                  device float* grad_sigma [[buffer(15)]],
                                                  device float* grad_samples_rgb [[buffer(16)]],
                                                  device float* grad_background [[buffer(17)]],
                                                  constant mo::VolumeRenderParams& params [[buffer(18)]],
                                                  uint gid [[thread_position_in_grid]],
                                                  uint grid_size [[threads_per_grid]]) {
  for (mo::int64 r = gid; r < params.num_rays; r += grid_size) {
    mo::pvr_backward_ray<float, mo::VrFloatMath>(
        sigma, rgb, t_starts, t_ends, ray_offsets, ray_counts, background, params.background_per_ray != 0, r,
        params.num_rays, params.num_samples, params.early_termination, out_rgb, out_depth, out_opacity, weights,
        grad_rgb, grad_depth, grad_opacity, grad_weights, params.has_weight_grad != 0, grad_sigma,
        grad_samples_rgb, grad_background);
  }
}
