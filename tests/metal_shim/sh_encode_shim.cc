// Runs the SHEncode Metal shaders on the CPU (see tests/metal_shim/msl_shim.h),
// each entry point over its whole dispatch grid, picked by degree and dtype
// as kernels/metal/sh_encode_metal.mm picks it by name. Driven by
// tests/test_sh_encode_metal_shim.py through ctypes.
#include "tests/metal_shim/msl_shim.h"
#include "sh_encode.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

#define SHIM_ROW(KIND, TN) {KIND##_d1_##TN, KIND##_d2_##TN, KIND##_d3_##TN, KIND##_d4_##TN}
static decltype(&sh_encode_forward_d1_float32) const kForward32[4] = SHIM_ROW(sh_encode_forward, float32);
static decltype(&sh_encode_forward_d1_float16) const kForward16[4] = SHIM_ROW(sh_encode_forward, float16);
static decltype(&sh_encode_backward_d1_float32) const kBackward32[4] = SHIM_ROW(sh_encode_backward, float32);
static decltype(&sh_encode_backward_d1_float16) const kBackward16[4] = SHIM_ROW(sh_encode_backward, float16);
#undef SHIM_ROW

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
    RunGrid(kForward32[degree - 1], grid, static_cast<const float*>(dirs), static_cast<float*>(values), p);
  } else {
    RunGrid(kForward16[degree - 1], grid, static_cast<const half*>(dirs), static_cast<half*>(values), p);
  }
  return 0;
}

int shim_sh_encode_backward(int dtype, const void* grad, const void* dirs, void* grad_dirs, int64_t n, int degree,
                            uint grid) {
  if (degree < 1 || degree > 4) return 1;
  const mo::SHEncodeParams p = {n};
  if (dtype == 0) {
    RunGrid(kBackward32[degree - 1], grid, static_cast<const float*>(grad), static_cast<const float*>(dirs),
            static_cast<float*>(grad_dirs), p);
  } else {
    RunGrid(kBackward16[degree - 1], grid, static_cast<const half*>(grad), static_cast<const half*>(dirs),
            static_cast<half*>(grad_dirs), p);
  }
  return 0;
}

}  // extern "C"
