// Runs the DistortionLoss Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "distortion_loss.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "distortion_loss.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

}  // namespace

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

// Every entry point the plans of kernels/metal_plan/ ask for is instantiated:
// -1 when one is missing, else the number of instantiations none of them reached.
int shim_distortion_loss_find_every_kernel() {
  if (!msl_shim::find_kernel<decltype(&distortion_loss_forward<float>)>(kKernels, "distortion_loss_forward") ||
      !msl_shim::find_kernel<decltype(&distortion_loss_backward<float>)>(kKernels, "distortion_loss_backward")) {
    return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
