// ZeroOut Metal shaders, one entry point per dtype (MSL has no double).
// The per-element rule comes from kernels/common/zero_out.h.
#include "kernels/common/zero_out.h"

#define MO_ZERO_OUT_KERNEL(NAME, T)                                        \
  kernel void NAME(device const T* in [[buffer(0)]], device T* out [[buffer(1)]], \
                   constant mo::ZeroOutParams& params [[buffer(2)]],             \
                   uint gid [[thread_position_in_grid]],                          \
                   uint grid_size [[threads_per_grid]]) {                        \
    for (mo::int64 i = gid; i < params.num_elements; i += grid_size) {            \
      out[i] = mo::zero_out_element(in[i], i, params.preserve_index);             \
    }                                                                             \
  }

MO_ZERO_OUT_KERNEL(zero_out_int32, int)
MO_ZERO_OUT_KERNEL(zero_out_int64, long)
MO_ZERO_OUT_KERNEL(zero_out_float32, float)
