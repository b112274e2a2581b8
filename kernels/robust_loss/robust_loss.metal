// RobustLoss Metal shaders (forward; fused backward with the alpha / scale
// reductions). The arithmetic is kernels/robust_loss/robust_loss.h.
//
// Backward reduction: with G threads and C channels, thread g owns channel
// g % C and the rows g / C, g / C + G / C, ... (G >= C), or, when G < C, the
// channels g, g + G, ... over all rows. Each thread sums its elements in a
// register and adds the sum to dalpha / dscale with one atomic per channel it
// owns, so the number of atomics is about G, not the number of elements.
// The host zero-fills dalpha / dscale first. No 64-bit division per element:
// the forward keeps each element's channel by adding the grid stride.
// atomic_float needs MSL 3.0:
// metal_ops: msl 3.0
#include "kernels/robust_loss/robust_loss.h"

// Channel of flat index t < 2^32 and the channel step of a stride, without a
// 64-bit modulo (Apple GPUs have no 64-bit divider): when channels <= t it fits 32 bits.
inline mo::int64 robust_loss_channel_of(uint t, mo::int64 channels) {
  return mo::int64(t) < channels ? mo::int64(t) : mo::int64(t % uint(channels));
}

template <typename T>
[[kernel]] void robust_loss_forward(device const T* x [[buffer(mo::kRobustLossX)]], device const float* alpha [[buffer(mo::kRobustLossAlpha)]],
                                    device const float* scale [[buffer(mo::kRobustLossScale)]], device T* out [[buffer(mo::kRobustLossOut)]],
                                    constant mo::RobustLossParams& p [[buffer(mo::kRobustLossParams)]],
                                    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  const mo::int64 channels = p.channels;
  const mo::int64 col_step = robust_loss_channel_of(grid_size, channels);
  mo::int64 col = robust_loss_channel_of(gid, channels);
  for (mo::int64 i = gid; i < p.num_elements; i += grid_size) {
    out[i] = T(mo::robust_loss_value(float(x[i]), alpha[mo::robust_loss_param_index(col, p.alpha_vec)],
                                     scale[mo::robust_loss_param_index(col, p.scale_vec)]));
    col += col_step;
    if (col >= channels) col -= channels;
  }
}

template <typename T>
[[kernel]] void robust_loss_backward(device const T* grad [[buffer(mo::kRobustLossGradGrad)]], device const T* x [[buffer(mo::kRobustLossGradX)]],
                                     device const float* alpha [[buffer(mo::kRobustLossGradAlpha)]], device const float* scale [[buffer(mo::kRobustLossGradScale)]],
                                     device T* dx [[buffer(mo::kRobustLossGradDx)]], device metal::atomic_float* dalpha [[buffer(mo::kRobustLossGradDalpha)]],
                                     device metal::atomic_float* dscale [[buffer(mo::kRobustLossGradDscale)]],
                                     constant mo::RobustLossParams& p [[buffer(mo::kRobustLossGradParams)]],
                                     uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  const mo::int64 channels = p.channels;
  const mo::int64 rows = p.rows;
  mo::int64 col_begin, col_step, row_begin, row_step;
  if (mo::int64(grid_size) >= channels) {
    const uint c32 = uint(channels);  // channels <= grid_size: 32 bits
    const uint lanes = grid_size / c32;
    if (gid >= lanes * c32) return;
    col_begin = gid % c32;
    col_step = channels;
    row_begin = gid / c32;
    row_step = lanes;
  } else {
    col_begin = gid;
    col_step = grid_size;
    row_begin = 0;
    row_step = 1;
  }
  for (mo::int64 col = col_begin; col < channels; col += col_step) {
    const mo::RobustLossCoeffs k = mo::robust_loss_coeffs(alpha[mo::robust_loss_param_index(col, p.alpha_vec)],
                                                          scale[mo::robust_loss_param_index(col, p.scale_vec)]);
    float sum_a = 0.0f, sum_c = 0.0f;
    for (mo::int64 row = row_begin; row < rows; row += row_step) {
      const mo::int64 i = row * channels + col;
      float rho, d_x, d_a, d_c;
      mo::robust_loss_grads_k(float(x[i]), k, rho, d_x, d_a, d_c);
      const float g = float(grad[i]);
      dx[i] = T(g * d_x);
      sum_a += g * d_a;
      sum_c += g * d_c;
    }
    metal::atomic_fetch_add_explicit(dalpha + mo::robust_loss_param_index(col, p.alpha_vec), sum_a,
                                     metal::memory_order_relaxed);
    metal::atomic_fetch_add_explicit(dscale + mo::robust_loss_param_index(col, p.scale_vec), sum_c,
                                     metal::memory_order_relaxed);
  }
}

// Host names robust_loss_<kind>_<TN>, the names robust_loss_metal.mm asks for.
template [[host_name("robust_loss_forward_float32")]] [[kernel]] decltype(robust_loss_forward<float>) robust_loss_forward<float>;
template [[host_name("robust_loss_backward_float32")]] [[kernel]] decltype(robust_loss_backward<float>) robust_loss_backward<float>;
template [[host_name("robust_loss_forward_float16")]] [[kernel]] decltype(robust_loss_forward<half>) robust_loss_forward<half>;
template [[host_name("robust_loss_backward_float16")]] [[kernel]] decltype(robust_loss_backward<half>) robust_loss_backward<half>;
