// Runs the SceneContract Metal shaders on the CPU (see tests/metal_shim/msl_shim.h),
// each entry point over its whole dispatch grid, picked by norm and dtype as
// kernels/scene_contract/scene_contract_metal.cc picks it by name. Driven by
// tests/test_scene_contract_metal_shim.py through ctypes.
#include <string>

#include "tests/metal_shim/msl_shim.h"
#include "scene_contract.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "scene_contract.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// The entry point the plan asks for: scene_contract_<kind>_<norm>_<dtype>.
template <typename Fn>
Fn Shader(const char* kind, int norm, int dtype) {
  return msl_shim::find_kernel<Fn>(kKernels, std::string("scene_contract_") + kind +
                                                 (norm == mo::kSceneContractL2 ? "_l2" : "_linf") +
                                                 (dtype == 1 ? "_float16" : "_float32"));
}

template <typename T>
using Forward = decltype(&scene_contract_forward<mo::kSceneContractL2, T>);
template <typename T>
using Backward = decltype(&scene_contract_backward<mo::kSceneContractL2, T>);

template <typename Kernel, typename... Args>
int RunGrid(Kernel shader, uint grid, Args... args) {
  if (!shader) return 2;
  for (uint gid = 0; gid < grid; ++gid) shader(args..., gid, grid);
  return 0;
}

}  // namespace

extern "C" {

// dtype 0 = float32, 1 = float16; norm 0 = l2, 1 = linf. Returns 0, 1 for
// another norm, 2 for a missing entry point.
int shim_scene_contract_forward(int dtype, const void* x, void* y, int64_t n, int norm, uint grid) {
  if (norm != mo::kSceneContractL2 && norm != mo::kSceneContractLinf) return 1;
  const mo::SceneContractParams p = {n};
  if (dtype == 0) {
    return RunGrid(Shader<Forward<float>>("forward", norm, dtype), grid, static_cast<const float*>(x),
                   static_cast<float*>(y), p);
  }
  return RunGrid(Shader<Forward<half>>("forward", norm, dtype), grid, static_cast<const half*>(x),
                 static_cast<half*>(y), p);
}

int shim_scene_contract_backward(int dtype, const void* grad, const void* x, void* dx, int64_t n, int norm,
                                 uint grid) {
  if (norm != mo::kSceneContractL2 && norm != mo::kSceneContractLinf) return 1;
  const mo::SceneContractParams p = {n};
  if (dtype == 0) {
    return RunGrid(Shader<Backward<float>>("backward", norm, dtype), grid, static_cast<const float*>(grad),
                   static_cast<const float*>(x), static_cast<float*>(dx), p);
  }
  return RunGrid(Shader<Backward<half>>("backward", norm, dtype), grid, static_cast<const half*>(grad),
                 static_cast<const half*>(x), static_cast<half*>(dx), p);
}

// Finds every entry point the plan can ask for (both norms, both dtypes): -1
// when one is missing, else the number of the shader's instantiations none of
// those names reached.
int shim_scene_contract_find_every_kernel() {
  for (int norm : {mo::kSceneContractL2, mo::kSceneContractLinf}) {
    if (!Shader<Forward<float>>("forward", norm, 0) || !Shader<Forward<half>>("forward", norm, 1) ||
        !Shader<Backward<float>>("backward", norm, 0) || !Shader<Backward<half>>("backward", norm, 1)) {
      return -1;
    }
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
