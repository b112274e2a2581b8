// Runs the DistortionLoss Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "distortion_loss.metal"  // the expanded source the library embeds ($(BUILD)/gen)

extern "C" {

void shim_distortion_loss_forward(const float* w, const float* t, float* loss, int64_t rays,
                                  int64_t samples, uint grid) {
  const mo::DistortionLossParams p = {rays, samples};
  for (uint gid = 0; gid < grid; ++gid) distortion_loss_forward<float>(w, t, loss, p, gid, grid);
}

void shim_distortion_loss_backward(const float* g, const float* w, const float* t, float* gw,
                                   float* gt, int64_t rays, int64_t samples, uint grid) {
  const mo::DistortionLossParams p = {rays, samples};
  for (uint gid = 0; gid < grid; ++gid) distortion_loss_backward<float>(g, w, t, gw, gt, p, gid, grid);
}

}  // extern "C"
