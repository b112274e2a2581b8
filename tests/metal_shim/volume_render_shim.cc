// Runs the VolumeRender Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "volume_render.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "volume_render.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

}  // namespace

extern "C" {

void shim_volume_render_forward_float32(const float* sigma, const float* rgb, const float* t, const float* background,
                                        float* out_rgb, float* out_depth, float* out_opacity, float* weights,
                                        int64_t num_rays, int64_t num_samples, float early_termination,
                                        int32_t background_per_ray, int32_t write_weights, uint grid_size) {
  const mo::VolumeRenderParams params = mo::make_volume_render_params(
      num_rays, num_samples, early_termination, background_per_ray != 0, write_weights != 0, false);
  for (uint gid = 0; gid < grid_size; ++gid) {
    volume_render_forward<float>(sigma, rgb, t, background, out_rgb, out_depth, out_opacity, weights, params, gid,
                                  grid_size);
  }
}

void shim_volume_render_backward_float32(const float* sigma, const float* rgb, const float* t,
                                         const float* background, const float* out_rgb, const float* out_depth,
                                         const float* out_opacity, const float* weights, const float* grad_rgb,
                                         const float* grad_depth, const float* grad_opacity,
                                         const float* grad_weights, float* grad_sigma, float* grad_samples_rgb,
                                         float* grad_background, int64_t num_rays, int64_t num_samples,
                                         float early_termination, int32_t background_per_ray,
                                         int32_t has_weight_grad, uint grid_size) {
  const mo::VolumeRenderParams params = mo::make_volume_render_params(
      num_rays, num_samples, early_termination, background_per_ray != 0, false, has_weight_grad != 0);
  for (uint gid = 0; gid < grid_size; ++gid) {
    volume_render_backward<float>(sigma, rgb, t, background, out_rgb, out_depth, out_opacity, weights, grad_rgb,
                                   grad_depth, grad_opacity, grad_weights, grad_sigma, grad_samples_rgb,
                                   grad_background, params, gid, grid_size);
  }
}

// Every entry point the plans of kernels/metal_plan/ ask for is instantiated:
// -1 when one is missing, else the number of instantiations none of them reached.
int shim_volume_render_find_every_kernel() {
  if (!msl_shim::find_kernel<decltype(&volume_render_forward<float>)>(kKernels, "volume_render_forward_float32") ||
      !msl_shim::find_kernel<decltype(&volume_render_backward<float>)>(kKernels, "volume_render_backward_float32")) {
    return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
