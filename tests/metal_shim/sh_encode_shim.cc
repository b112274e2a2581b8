// Runs the SHEncode Metal shaders on the CPU (see tests/metal_shim/msl_shim.h),
// each entry point over its whole dispatch grid, picked by degree and dtype
// as kernels/sh_encode/sh_encode_metal.cc picks it by name. Driven by
// tests/test_sh_encode_metal_shim.py through ctypes.
#include <string>

#include "tests/metal_shim/msl_shim.h"
#include "sh_encode.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "sh_encode.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// The entry point sh_encode_metal.cc asks for: sh_encode_<kind>_d<degree>_<dtype>.
template <typename Fn>
Fn Shader(const char* kind, int degree, int dtype) {
  return msl_shim::find_kernel<Fn>(kKernels, std::string("sh_encode_") + kind + "_d" + std::to_string(degree) +
                                                 (dtype == 1 ? "_float16" : "_float32"));
}

template <typename T>
using Forward = decltype(&sh_encode_forward<1, T>);
template <typename T>
using Backward = decltype(&sh_encode_backward<1, T>);

template <typename Kernel, typename... Args>
void RunGrid(Kernel shader, uint grid, Args... args) {
  for (uint gid = 0; gid < grid; ++gid) shader(args..., gid, grid);
}

}  // namespace

extern "C" {

// dtype 0 = float32, 1 = float16. Returns 0, or 1 for a degree outside 1..4.
int shim_sh_encode_forward(int dtype, const void* dirs, void* values, int64_t n, int degree, uint grid) {
  if (degree < 1 || degree > 4) return 1;
  const mo::SHEncodeParams p = {n};
  if (dtype == 0) {
    Forward<float> shader = Shader<Forward<float>>("forward", degree, dtype);
    if (!shader) return 2;
    RunGrid(shader, grid, static_cast<const float*>(dirs), static_cast<float*>(values), p);
  } else {
    Forward<half> shader = Shader<Forward<half>>("forward", degree, dtype);
    if (!shader) return 2;
    RunGrid(shader, grid, static_cast<const half*>(dirs), static_cast<half*>(values), p);
  }
  return 0;
}

int shim_sh_encode_backward(int dtype, const void* grad, const void* dirs, void* grad_dirs, int64_t n, int degree,
                            uint grid) {
  if (degree < 1 || degree > 4) return 1;
  const mo::SHEncodeParams p = {n};
  if (dtype == 0) {
    Backward<float> shader = Shader<Backward<float>>("backward", degree, dtype);
    if (!shader) return 2;
    RunGrid(shader, grid, static_cast<const float*>(grad), static_cast<const float*>(dirs),
            static_cast<float*>(grad_dirs), p);
  } else {
    Backward<half> shader = Shader<Backward<half>>("backward", degree, dtype);
    if (!shader) return 2;
    RunGrid(shader, grid, static_cast<const half*>(grad), static_cast<const half*>(dirs),
            static_cast<half*>(grad_dirs), p);
  }
  return 0;
}

// Finds every entry point sh_encode_metal.cc can ask for (degree 1..4, both
// dtypes): -1 when one is missing, else the number of the shader's
// instantiations none of those names reached.
int shim_sh_encode_find_every_kernel() {
  for (int degree = 1; degree <= 4; ++degree) {
    if (!Shader<Forward<float>>("forward", degree, 0) || !Shader<Forward<half>>("forward", degree, 1) ||
        !Shader<Backward<float>>("backward", degree, 0) || !Shader<Backward<half>>("backward", degree, 1)) {
      return -1;
    }
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
