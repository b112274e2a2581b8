// Runs the TruncExp Metal shaders on the CPU (see tests/metal_shim/msl_shim.h),
// each entry point over its whole dispatch grid, picked by dtype as
// kernels/trunc_exp/trunc_exp_metal.cc picks it by name. Driven by
// tests/test_trunc_exp.py through ctypes.
#include <string>

#include "tests/metal_shim/msl_shim.h"
#include "trunc_exp.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "trunc_exp.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// The entry point trunc_exp_metal.cc asks for: trunc_exp_<kind>_<dtype>.
template <typename Fn>
Fn Shader(const char* kind, int dtype) {
  return msl_shim::find_kernel<Fn>(kKernels, std::string("trunc_exp_") + kind + (dtype == 1 ? "_float16" : "_float32"));
}

template <typename T>
using Forward = decltype(&trunc_exp_forward<T>);
template <typename T>
using Backward = decltype(&trunc_exp_backward<T>);

template <typename Kernel, typename... Args>
void RunGrid(Kernel shader, uint grid, Args... args) {
  for (uint gid = 0; gid < grid; ++gid) shader(args..., gid, grid);
}

template <typename T>
int RunForward(int dtype, const void* x, void* y, int64_t n, uint grid) {
  const Forward<T> shader = Shader<Forward<T>>("forward", dtype);
  if (!shader) return 2;
  RunGrid(shader, grid, static_cast<const T*>(x), static_cast<T*>(y), mo::TruncExpParams{n});
  return 0;
}

template <typename T>
int RunBackward(int dtype, const void* dy, const void* x, void* dx, int64_t n, uint grid) {
  const Backward<T> shader = Shader<Backward<T>>("backward", dtype);
  if (!shader) return 2;
  RunGrid(shader, grid, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx),
          mo::TruncExpParams{n});
  return 0;
}

}  // namespace

extern "C" {

// dtype 0 = float32, 1 = float16. Returns 0, or 2 when the entry point is missing.
int shim_trunc_exp_forward(int dtype, const void* x, void* y, int64_t n, uint grid) {
  return dtype == 0 ? RunForward<float>(dtype, x, y, n, grid) : RunForward<half>(dtype, x, y, n, grid);
}

int shim_trunc_exp_backward(int dtype, const void* dy, const void* x, void* dx, int64_t n, uint grid) {
  return dtype == 0 ? RunBackward<float>(dtype, dy, x, dx, n, grid) : RunBackward<half>(dtype, dy, x, dx, n, grid);
}

// Finds every entry point trunc_exp_metal.cc can ask for (both kinds and
// dtypes): -1 when one is missing, else the number of the shader's
// instantiations none of those names reached.
int shim_trunc_exp_find_every_kernel() {
  for (int dtype = 0; dtype <= 1; ++dtype) {
    const bool found = dtype == 0 ? Shader<Forward<float>>("forward", dtype) && Shader<Backward<float>>("backward", dtype)
                                  : Shader<Forward<half>>("forward", dtype) && Shader<Backward<half>>("backward", dtype);
    if (!found) return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}

}  // extern "C"
