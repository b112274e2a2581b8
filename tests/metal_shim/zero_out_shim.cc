// Runs the ZeroOut Metal shaders on the CPU (see tests/metal_shim/msl_shim.h).
#include "tests/metal_shim/msl_shim.h"
#include "zero_out.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

template <typename T, typename Kernel>
void RunZeroOut(Kernel shader, const T* in, T* out, int64_t n, int64_t preserve_index, uint grid_size) {
  const mo::ZeroOutParams params = {n, preserve_index};
  for (uint gid = 0; gid < grid_size; ++gid) shader(in, out, params, gid, grid_size);
}

}  // namespace

extern "C" {
void shim_zero_out_int32(const int* in, int* out, int64_t n, int64_t p, uint grid) { RunZeroOut(zero_out_int32, in, out, n, p, grid); }
void shim_zero_out_int64(const long* in, long* out, int64_t n, int64_t p, uint grid) { RunZeroOut(zero_out_int64, in, out, n, p, grid); }
void shim_zero_out_float32(const float* in, float* out, int64_t n, int64_t p, uint grid) { RunZeroOut(zero_out_float32, in, out, n, p, grid); }
}
