// Runs the RobustLoss Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "robust_loss.metal"  // the expanded source the library embeds ($(BUILD)/gen)

extern "C" {

void shim_robust_loss_forward(const float* x, const float* alpha, const float* scale, float* out,
                              int64_t n, int64_t channels, int64_t alpha_vec, int64_t scale_vec,
                              uint grid) {
  const mo::RobustLossParams p = {n, channels, channels > 0 ? n / channels : 0, alpha_vec, scale_vec};
  for (uint gid = 0; gid < grid; ++gid) robust_loss_forward_float32(x, alpha, scale, out, p, gid, grid);
}

// dalpha / dscale must be zero-filled by the caller, as the Metal host code does.
void shim_robust_loss_backward(const float* grad, const float* x, const float* alpha,
                               const float* scale, float* dx, float* dalpha, float* dscale,
                               int64_t n, int64_t channels, int64_t alpha_vec, int64_t scale_vec,
                               uint grid) {
  const mo::RobustLossParams p = {n, channels, channels > 0 ? n / channels : 0, alpha_vec, scale_vec};
  static_assert(sizeof(metal::atomic_float) == sizeof(float), "atomic_float must alias float");
  for (uint gid = 0; gid < grid; ++gid) {
    robust_loss_backward_float32(grad, x, alpha, scale, dx, reinterpret_cast<metal::atomic_float*>(dalpha),
                                 reinterpret_cast<metal::atomic_float*>(dscale), p, gid, grid);
  }
}

}  // extern "C"
