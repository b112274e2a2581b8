// DistortionLoss Metal shaders: one thread per ray, O(S) prefix sums.
// The arithmetic is kernels/distortion_loss/distortion_loss.h. Rays whose t decreases
// get a NaN loss / NaN gradients (the host does not read the data back).
#include "kernels/distortion_loss/distortion_loss.h"

template <typename T>
[[kernel]] void distortion_loss_forward(device const T* weights [[buffer(mo::kDistortionLossW)]],
                                        device const T* t [[buffer(mo::kDistortionLossT)]],
                                        device T* loss [[buffer(mo::kDistortionLossLoss)]],
                                        constant mo::DistortionLossParams& p [[buffer(mo::kDistortionLossParams)]],
                                        uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  const mo::int64 s = p.num_samples;
  for (mo::int64 r = gid; r < p.num_rays; r += grid_size) {
    loss[r] = mo::distortion_loss_ray(weights + r * s, t + r * (s + 1), s);
  }
}

template <typename T>
[[kernel]] void distortion_loss_backward(device const T* grad [[buffer(mo::kDistortionLossGradGrad)]],
                                         device const T* weights [[buffer(mo::kDistortionLossGradW)]],
                                         device const T* t [[buffer(mo::kDistortionLossGradT)]],
                                         device T* grad_weights [[buffer(mo::kDistortionLossGradDw)]],
                                         device T* grad_t [[buffer(mo::kDistortionLossGradDt)]],
                                         constant mo::DistortionLossParams& p [[buffer(mo::kDistortionLossGradParams)]],
                                         uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  const mo::int64 s = p.num_samples;
  for (mo::int64 r = gid; r < p.num_rays; r += grid_size) {
    mo::distortion_loss_grad_ray(grad[r], weights + r * s, t + r * (s + 1), s, grad_weights + r * s,
                                 grad_t + r * (s + 1));
  }
}

// The host names distortion_loss_metal.mm's plans ask for (float32 only).
template [[host_name("distortion_loss_forward")]] [[kernel]] decltype(distortion_loss_forward<float>) distortion_loss_forward<float>;
template [[host_name("distortion_loss_backward")]] [[kernel]] decltype(distortion_loss_backward<float>) distortion_loss_backward<float>;
