// Runs the RobustLoss Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include <cstdlib>
#include <string>

#include "tests/metal_shim/msl_shim.h"
#include "robust_loss.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "robust_loss.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// The entry point robust_loss_metal.cc asks for: robust_loss_<kind>_<dtype>.
template <typename Fn>
Fn Find(const char* kind, const char* dtype) {
  return msl_shim::find_kernel<Fn>(kKernels, std::string("robust_loss_") + kind + "_" + dtype);
}

// The float32 one (the shim tests run float32).
template <typename Fn>
Fn Shader(const char* kind) {
  Fn shader = Find<Fn>(kind, "float32");
  if (!shader) std::abort();
  return shader;
}

}  // namespace

extern "C" {

void shim_robust_loss_forward(const float* x, const float* alpha, const float* scale, float* out,
                              int64_t n, int64_t channels, int64_t alpha_vec, int64_t scale_vec,
                              uint grid) {
  const mo::RobustLossParams p = {n, channels, channels > 0 ? n / channels : 0, alpha_vec, scale_vec};
  auto shader = Shader<decltype(&robust_loss_forward<float>)>("forward");
  for (uint gid = 0; gid < grid; ++gid) shader(x, alpha, scale, out, p, gid, grid);
}

// dalpha / dscale must be zero-filled by the caller, as the Metal host code does.
void shim_robust_loss_backward(const float* grad, const float* x, const float* alpha,
                               const float* scale, float* dx, float* dalpha, float* dscale,
                               int64_t n, int64_t channels, int64_t alpha_vec, int64_t scale_vec,
                               uint grid) {
  const mo::RobustLossParams p = {n, channels, channels > 0 ? n / channels : 0, alpha_vec, scale_vec};
  static_assert(sizeof(metal::atomic_float) == sizeof(float), "atomic_float must alias float");
  auto shader = Shader<decltype(&robust_loss_backward<float>)>("backward");
  for (uint gid = 0; gid < grid; ++gid) {
    shader(grad, x, alpha, scale, dx, reinterpret_cast<metal::atomic_float*>(dalpha),
           reinterpret_cast<metal::atomic_float*>(dscale), p, gid, grid);
  }
}

// Every entry point robust_loss_metal.cc can ask for is instantiated: -1
// when one is missing, else the number of instantiations none of them reached.
int shim_robust_loss_find_every_kernel() {
  for (const char* kind : {"forward", "backward"}) {
    const bool forward = kind[0] == 'f';
    const bool found32 = forward ? Find<decltype(&robust_loss_forward<float>)>(kind, "float32") != nullptr
                                 : Find<decltype(&robust_loss_backward<float>)>(kind, "float32") != nullptr;
    const bool found16 = forward ? Find<decltype(&robust_loss_forward<half>)>(kind, "float16") != nullptr
                                 : Find<decltype(&robust_loss_backward<half>)>(kind, "float16") != nullptr;
    if (!found32 || !found16) return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
