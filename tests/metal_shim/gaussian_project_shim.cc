// Runs the GaussianProject Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "gaussian_project.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "gaussian_project.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

}  // namespace

extern "C" {

void shim_gaussian_project_forward(const float* means, const float* quats, const float* scales,
                                   const float* opacities, const float* viewmat, const float* k, float* means2d,
                                   float* conics, float* depths, int* radii, int64_t n, int width, int height,
                                   float near_plane, float far_plane, float eps2d, uint grid) {
  const mo::GaussianProjectParams p = {n, width, height, near_plane, far_plane, eps2d, 0.0f};
  for (uint gid = 0; gid < grid; ++gid) {
    gaussian_project_forward<float>(means, quats, scales, opacities, viewmat, k, means2d, conics, depths, radii, p,
                                    gid, grid);
  }
}

void shim_gaussian_project_backward(const float* grad_means2d, const float* grad_conics, const float* grad_depths,
                                    const float* means, const float* quats, const float* scales,
                                    const float* viewmat, const float* k, const int* radii, float* grad_means,
                                    float* grad_quats, float* grad_scales, int64_t n, int width, int height,
                                    float near_plane, float far_plane, float eps2d, uint grid) {
  const mo::GaussianProjectParams p = {n, width, height, near_plane, far_plane, eps2d, 0.0f};
  for (uint gid = 0; gid < grid; ++gid) {
    gaussian_project_backward<float>(grad_means2d, grad_conics, grad_depths, means, quats, scales, viewmat, k, radii,
                                     grad_means, grad_quats, grad_scales, p, gid, grid);
  }
}

// Every entry point the plans of gaussian_project_metal.cc ask for is
// instantiated: -1 when one is missing, else the number of instantiations
// none of them reached.
int shim_gaussian_project_find_every_kernel() {
  if (!msl_shim::find_kernel<decltype(&gaussian_project_forward<float>)>(kKernels, "gaussian_project_forward") ||
      !msl_shim::find_kernel<decltype(&gaussian_project_backward<float>)>(kKernels, "gaussian_project_backward")) {
    return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
