// DistortionLoss Metal shaders: one thread per ray, O(S) prefix sums.
// The arithmetic is kernels/common/distortion_loss.h. Rays whose t decreases
// get a NaN loss / NaN gradients (the host does not read the data back).
#include "kernels/common/distortion_loss.h"

kernel void distortion_loss_forward(device const float* weights [[buffer(0)]],
                                    device const float* t [[buffer(1)]],
                                    device float* loss [[buffer(2)]],
                                    constant mo::DistortionLossParams& p [[buffer(3)]],
                                    uint gid [[thread_position_in_grid]],
                                    uint grid_size [[threads_per_grid]]) {
  const mo::int64 s = p.num_samples;
  for (mo::int64 r = gid; r < p.num_rays; r += grid_size) {
    loss[r] = mo::distortion_loss_ray(weights + r * s, t + r * (s + 1), s);
  }
}

kernel void distortion_loss_backward(device const float* grad [[buffer(0)]],
                                     device const float* weights [[buffer(1)]],
                                     device const float* t [[buffer(2)]],
                                     device float* grad_weights [[buffer(3)]],
                                     device float* grad_t [[buffer(4)]],
                                     constant mo::DistortionLossParams& p [[buffer(5)]],
                                     uint gid [[thread_position_in_grid]],
                                     uint grid_size [[threads_per_grid]]) {
  const mo::int64 s = p.num_samples;
  for (mo::int64 r = gid; r < p.num_rays; r += grid_size) {
    mo::distortion_loss_grad_ray(grad[r], weights + r * s, t + r * (s + 1), s, grad_weights + r * s,
                                 grad_t + r * (s + 1));
  }
}
