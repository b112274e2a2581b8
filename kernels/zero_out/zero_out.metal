// ZeroOut Metal shaders, one entry point per dtype (MSL has no double).
// The per-element rule comes from kernels/zero_out/zero_out.h.
#include "kernels/zero_out/zero_out.h"

template <typename T>
[[kernel]] void zero_out(device const T* in [[buffer(mo::kZeroOutIn)]], device T* out [[buffer(mo::kZeroOutOut)]],
                         constant mo::ZeroOutParams& params [[buffer(mo::kZeroOutParams)]], uint gid [[thread_position_in_grid]],
                         uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < params.num_elements; i += grid_size) {
    out[i] = mo::zero_out_element(in[i], i, params.preserve_index);
  }
}

template [[host_name("zero_out_int32")]] [[kernel]] decltype(zero_out<int>) zero_out<int>;
template [[host_name("zero_out_int64")]] [[kernel]] decltype(zero_out<long>) zero_out<long>;
template [[host_name("zero_out_float32")]] [[kernel]] decltype(zero_out<float>) zero_out<float>;
