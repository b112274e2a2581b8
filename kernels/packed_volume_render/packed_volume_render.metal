// PackedVolumeRender Metal shaders: one thread per ray (grid-stride), float32
// only (MSL has no double). The arithmetic is kernels/packed_volume_render/packed_volume_render.h
// (on kernels/common/volume_render_math.h); each shader gathers its buffers (indices named there)
// into the arguments struct the per-ray drivers take. Rays with an invalid
// layout or invalid samples get NaN outputs; the two validation shaders run
// first and leave the first invalid ray's check in a PvrCheckResult, which the
// host reads after the command buffer completes and turns into the op's
// InvalidArgument error (the plans of packed_volume_render_metal.cc).
#include "kernels/packed_volume_render/packed_volume_render.h"

kernel void packed_volume_render_check_chunks(device const int* ray_offsets [[buffer(mo::kPvrCheckRayOffsets)]],
                                              device const int* ray_counts [[buffer(mo::kPvrCheckRayCounts)]],
                                              device const float* sigma [[buffer(mo::kPvrCheckSigma)]],
                                              device const float* t_starts [[buffer(mo::kPvrCheckTStarts)]],
                                              device const float* t_ends [[buffer(mo::kPvrCheckTEnds)]],
                                              device mo::int64* firsts [[buffer(mo::kPvrCheckFirsts)]],
                                              constant mo::PvrCheckParams& q [[buffer(mo::kPvrCheckParams)]],
                                              uint gid [[thread_position_in_grid]],
                                              uint grid_size [[threads_per_grid]]) {
  for (uint i = gid; i < uint(q.chunks); i += grid_size) {
    firsts[i] = mo::pvr_check_chunk(ray_offsets, ray_counts, sigma, t_starts, t_ends, int(i), q);
  }
}

// One thread.
kernel void packed_volume_render_check_first(device const int* ray_offsets [[buffer(mo::kPvrCheckRayOffsets)]],
                                             device const int* ray_counts [[buffer(mo::kPvrCheckRayCounts)]],
                                             device const float* sigma [[buffer(mo::kPvrCheckSigma)]],
                                             device const float* t_starts [[buffer(mo::kPvrCheckTStarts)]],
                                             device const float* t_ends [[buffer(mo::kPvrCheckTEnds)]],
                                             device const mo::int64* firsts [[buffer(mo::kPvrCheckFirsts)]],
                                             device mo::PvrCheckResult* result [[buffer(mo::kPvrCheckResult)]],
                                             constant mo::PvrCheckParams& q [[buffer(mo::kPvrCheckParams)]],
                                             uint gid [[thread_position_in_grid]]) {
  if (gid == 0) mo::pvr_check_first(ray_offsets, ray_counts, sigma, t_starts, t_ends, firsts, result, q);
}

kernel void packed_volume_render_forward_float32(
    device const float* sigma [[buffer(mo::kPvrForwardSigma)]], device const float* rgb [[buffer(mo::kPvrForwardRgb)]],
    device const float* t_starts [[buffer(mo::kPvrForwardTStarts)]],
    device const float* t_ends [[buffer(mo::kPvrForwardTEnds)]],
    device const int* ray_offsets [[buffer(mo::kPvrForwardRayOffsets)]],
    device const int* ray_counts [[buffer(mo::kPvrForwardRayCounts)]],
    device const float* background [[buffer(mo::kPvrForwardBackground)]],
    device float* out_rgb [[buffer(mo::kPvrForwardOutRgb)]], device float* out_depth [[buffer(mo::kPvrForwardDepth)]],
    device float* out_opacity [[buffer(mo::kPvrForwardOpacity)]],
    device float* weights [[buffer(mo::kPvrForwardWeights)]],
    constant mo::VolumeRenderParams& params [[buffer(mo::kPvrForwardParams)]], uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  mo::PackedVolumeRenderForwardArgs<float> a;
  mo::vr_set_render_args(params, &a);
  a.sigma = sigma;
  a.rgb = rgb;
  a.background = background;
  a.t_starts = t_starts;
  a.t_ends = t_ends;
  a.offsets = ray_offsets;
  a.counts = ray_counts;
  a.out_rgb = out_rgb;
  a.depth = out_depth;
  a.opacity = out_opacity;
  a.weights = params.write_weights != 0 ? weights : nullptr;
  for (mo::int64 r = gid; r < a.rays; r += grid_size) mo::pvr_forward_ray<float, mo::VrFloatMath>(a, r);
}

kernel void packed_volume_render_backward_float32(
    device const float* sigma [[buffer(mo::kPvrBackwardSigma)]],
    device const float* rgb [[buffer(mo::kPvrBackwardRgb)]],
    device const float* t_starts [[buffer(mo::kPvrBackwardTStarts)]],
    device const float* t_ends [[buffer(mo::kPvrBackwardTEnds)]],
    device const int* ray_offsets [[buffer(mo::kPvrBackwardRayOffsets)]],
    device const int* ray_counts [[buffer(mo::kPvrBackwardRayCounts)]],
    device const float* background [[buffer(mo::kPvrBackwardBackground)]],
    device const float* out_rgb [[buffer(mo::kPvrBackwardOutRgb)]],
    device const float* out_depth [[buffer(mo::kPvrBackwardDepth)]],
    device const float* out_opacity [[buffer(mo::kPvrBackwardOpacity)]],
    device const float* weights [[buffer(mo::kPvrBackwardWeights)]],
    device const float* grad_rgb [[buffer(mo::kPvrBackwardGradRgb)]],
    device const float* grad_depth [[buffer(mo::kPvrBackwardGradDepth)]],
    device const float* grad_opacity [[buffer(mo::kPvrBackwardGradOpacity)]],
    device const float* grad_weights [[buffer(mo::kPvrBackwardGradWeights)]],
    device float* grad_sigma [[buffer(mo::kPvrBackwardGradSigma)]],
    device float* grad_samples_rgb [[buffer(mo::kPvrBackwardGradSamplesRgb)]],
    device float* grad_background [[buffer(mo::kPvrBackwardGradBackground)]],
    constant mo::VolumeRenderParams& params [[buffer(mo::kPvrBackwardParams)]], uint gid [[thread_position_in_grid]],
    uint grid_size [[threads_per_grid]]) {
  const bool has_weight_grad = params.has_weight_grad != 0;
  mo::PackedVolumeRenderBackwardArgs<float> a;
  mo::vr_set_render_args(params, &a);
  a.sigma = sigma;
  a.rgb = rgb;
  a.background = background;
  a.t_starts = t_starts;
  a.t_ends = t_ends;
  a.offsets = ray_offsets;
  a.counts = ray_counts;
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
  for (mo::int64 r = gid; r < a.rays; r += grid_size) mo::pvr_backward_ray<float, mo::VrFloatMath>(a, r);
}
