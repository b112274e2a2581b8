// RobustLoss CUDA kernels and their launchers (declared in robust_loss.h).
// The arithmetic is kernels/robust_loss/robust_loss.h.
#include "kernels/robust_loss/robust_loss.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

constexpr int kMaxSharedChannels = 2048;  // 16 KiB of shared sums per block
constexpr unsigned int kBackwardMaxBlocks = 1024;

// x and out may be one buffer (the kernel class forwards x's buffer), as may
// grad and dx below: no __restrict__ on those.
template <typename T>
__global__ void RobustLossForwardKernel(const T* x, const float* __restrict__ alpha,
                                        const float* __restrict__ scale, T* out,
                                        int64_t n, int64_t channels, int64_t alpha_vec,
                                        int64_t scale_vec) {
  if (alpha_vec == 0 && scale_vec == 0) {
    const RobustLossCoeffs k = robust_loss_coeffs(alpha[0], scale[0]);
    for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
      out[i] = T(robust_loss_value_k(static_cast<float>(x[i]), k));
    }
    return;
  }
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    const int64_t col = i % channels;
    out[i] = T(robust_loss_value(static_cast<float>(x[i]), alpha[alpha_vec * col],
                                 scale[scale_vec * col]));
  }
}

// Thread g of G owns channel g % C and rows g / C, g / C + G / C, ... (G >= C),
// or channels g, g + G, ... over all rows (G < C). Its sums go to shared memory
// (atomicAdd on shared), then one global atomicAdd per block and channel.
template <typename T>
__global__ void RobustLossBackwardKernel(const T* grad, const T* __restrict__ x,
                                         const float* __restrict__ alpha,
                                         const float* __restrict__ scale, T* dx,
                                         float* __restrict__ dalpha, float* __restrict__ dscale,
                                         int64_t n, int64_t channels, int64_t alpha_vec,
                                         int64_t scale_vec) {
  extern __shared__ float shared[];
  const int64_t na = alpha_vec ? channels : 1, ns = scale_vec ? channels : 1;
  const bool use_shared = na + ns <= kMaxSharedChannels;
  float* sh_a = shared;
  float* sh_c = shared + na;
  if (use_shared) {
    for (int64_t j = threadIdx.x; j < na + ns; j += blockDim.x) shared[j] = 0.0f;
    __syncthreads();
  }
  const int64_t g = GlobalThreadIndex();
  const int64_t grid = GlobalThreadCount();
  const int64_t rows = n / channels;
  int64_t col_begin, col_step, row_begin, row_step;
  bool active = true;
  if (grid >= channels) {
    const int64_t lanes = grid / channels;
    active = g < lanes * channels;
    col_begin = g % channels;
    col_step = channels;
    row_begin = g / channels;
    row_step = lanes;
  } else {
    col_begin = g;
    col_step = grid;
    row_begin = 0;
    row_step = 1;
  }
  if (active) {
    for (int64_t col = col_begin; col < channels; col += col_step) {
      const int64_t ia = alpha_vec * col, is = scale_vec * col;
      const RobustLossCoeffs k = robust_loss_coeffs(alpha[ia], scale[is]);
      float sum_a = 0.0f, sum_c = 0.0f;
      for (int64_t row = row_begin; row < rows; row += row_step) {
        const int64_t i = row * channels + col;
        float rho, d_x, d_a, d_c;
        robust_loss_grads_k(static_cast<float>(x[i]), k, rho, d_x, d_a, d_c);
        const float gi = static_cast<float>(grad[i]);
        dx[i] = T(gi * d_x);
        sum_a += gi * d_a;
        sum_c += gi * d_c;
      }
      if (use_shared) {
        atomicAdd(sh_a + ia, sum_a);
        atomicAdd(sh_c + is, sum_c);
      } else {
        atomicAdd(dalpha + ia, sum_a);
        atomicAdd(dscale + is, sum_c);
      }
    }
  }
  if (use_shared) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < na; j += blockDim.x) atomicAdd(dalpha + j, sh_a[j]);
    for (int64_t j = threadIdx.x; j < ns; j += blockDim.x) atomicAdd(dscale + j, sh_c[j]);
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchRobustLossForward(const T* x, const float* alpha, const float* scale, T* out,
                                    int64_t n, int64_t channels, bool alpha_vec, bool scale_vec,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  RobustLossForwardKernel<T><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(
      x, alpha, scale, out, n, channels, alpha_vec ? 1 : 0, scale_vec ? 1 : 0);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchRobustLossBackward(const T* grad, const T* x, const float* alpha,
                                     const float* scale, T* dx, float* dalpha, float* dscale,
                                     int64_t n, int64_t channels, bool alpha_vec, bool scale_vec,
                                     cudaStream_t stream) {
  const int64_t na = alpha_vec ? channels : 1, ns = scale_vec ? channels : 1;
  cudaError_t err = cudaMemsetAsync(dalpha, 0, sizeof(float) * na, stream);
  if (err == cudaSuccess) err = cudaMemsetAsync(dscale, 0, sizeof(float) * ns, stream);
  if (err != cudaSuccess || n == 0) return err;
  const unsigned int blocks = std::min(GridStrideBlocks(n), kBackwardMaxBlocks);
  const size_t shared = na + ns <= kMaxSharedChannels ? sizeof(float) * (na + ns) : 0;
  RobustLossBackwardKernel<T><<<blocks, kThreadsPerBlock, shared, stream>>>(
      grad, x, alpha, scale, dx, dalpha, dscale, n, channels, alpha_vec ? 1 : 0, scale_vec ? 1 : 0);
  return cudaGetLastError();
}

#define MO_INSTANTIATE_ROBUST_LOSS(T)                                                     \
  template cudaError_t LaunchRobustLossForward<T>(const T*, const float*, const float*, T*,      \
                                                  int64_t, int64_t, bool, bool, cudaStream_t);  \
  template cudaError_t LaunchRobustLossBackward<T>(const T*, const T*, const float*, const float*, \
                                                   T*, float*, float*, int64_t, int64_t, bool,   \
                                                   bool, cudaStream_t);
MO_INSTANTIATE_ROBUST_LOSS(float)
MO_INSTANTIATE_ROBUST_LOSS(__half)
MO_INSTANTIATE_ROBUST_LOSS(__nv_bfloat16)
#undef MO_INSTANTIATE_ROBUST_LOSS

}  // namespace cuda
}  // namespace mo
