// Runs the ZeroOut Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include <cstdlib>

#include "tests/metal_shim/msl_shim.h"
#include "zero_out.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

msl_shim::Kernel kKernels[] = {
#include "zero_out.kernels.inc"  // $(BUILD)/gen, from the shader's instantiations
};

// Runs the entry point zero_out_metal.cc asks for by `name`, of element type T.
template <typename T>
void RunZeroOut(const char* name, const T* in, T* out, int64_t n, int64_t preserve_index, uint grid_size) {
  auto shader = msl_shim::find_kernel<decltype(&zero_out<T>)>(kKernels, name);
  if (!shader) std::abort();
  const mo::ZeroOutParams params = {n, preserve_index};
  for (uint gid = 0; gid < grid_size; ++gid) shader(in, out, params, gid, grid_size);
}

}  // namespace

extern "C" {
void shim_zero_out_int32(const int* in, int* out, int64_t n, int64_t p, uint grid) { RunZeroOut("zero_out_int32", in, out, n, p, grid); }
void shim_zero_out_int64(const long* in, long* out, int64_t n, int64_t p, uint grid) { RunZeroOut("zero_out_int64", in, out, n, p, grid); }
void shim_zero_out_float32(const float* in, float* out, int64_t n, int64_t p, uint grid) { RunZeroOut("zero_out_float32", in, out, n, p, grid); }

// Every entry point zero_out_metal.cc can ask for is instantiated: -1 when
// one is missing, else the number of instantiations none of them reached.
int shim_zero_out_find_every_kernel() {
  if (!msl_shim::find_kernel<decltype(&zero_out<int>)>(kKernels, "zero_out_int32") ||
      !msl_shim::find_kernel<decltype(&zero_out<long>)>(kKernels, "zero_out_int64") ||
      !msl_shim::find_kernel<decltype(&zero_out<float>)>(kKernels, "zero_out_float32")) {
    return -1;
  }
  return msl_shim::kernels_not_found(kKernels);
}
}
