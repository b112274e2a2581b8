// TruncExp Metal shaders: one thread per element (grid-stride), float32
// arithmetic for float and half tensors; the formula is
// kernels/trunc_exp/trunc_exp.h (FusedMLP's trunc_exp). Entry points, TN in
// float32 / float16:
//   trunc_exp_forward_<TN>   x -> y = exp(x)
//   trunc_exp_backward_<TN>  dy, x -> dx = dy * exp(clamp(x, -15, 15))
#include "kernels/trunc_exp/trunc_exp.h"

template <typename T>
[[kernel]] void trunc_exp_forward(device const T* x [[buffer(mo::kTruncExpX)]], device T* y [[buffer(mo::kTruncExpY)]],
                                  constant mo::TruncExpParams& p [[buffer(mo::kTruncExpParams)]],
                                  uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < p.num_elements; i += grid_size) y[i] = T(mo::trunc_exp_forward(float(x[i])));
}

template <typename T>
[[kernel]] void trunc_exp_backward(device const T* dy [[buffer(mo::kTruncExpGradDy)]],
                                   device const T* x [[buffer(mo::kTruncExpGradX)]],
                                   device T* dx [[buffer(mo::kTruncExpGradDx)]],
                                   constant mo::TruncExpParams& p [[buffer(mo::kTruncExpGradParams)]],
                                   uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  for (mo::int64 i = gid; i < p.num_elements; i += grid_size) dx[i] = T(mo::trunc_exp_grad(float(dy[i]), float(x[i])));
}

// Host names trunc_exp_<kind>_<TN>, the names the plans of trunc_exp_metal.cc ask for.
template [[host_name("trunc_exp_forward_float32")]] [[kernel]] decltype(trunc_exp_forward<float>) trunc_exp_forward<float>;
template [[host_name("trunc_exp_forward_float16")]] [[kernel]] decltype(trunc_exp_forward<half>) trunc_exp_forward<half>;
template [[host_name("trunc_exp_backward_float32")]] [[kernel]] decltype(trunc_exp_backward<float>) trunc_exp_backward<float>;
template [[host_name("trunc_exp_backward_float16")]] [[kernel]] decltype(trunc_exp_backward<half>) trunc_exp_backward<half>;
