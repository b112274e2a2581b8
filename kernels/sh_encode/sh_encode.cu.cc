// SHEncode CUDA kernels and their launchers (declared in sh_encode.h). The
// polynomials and derivatives are kernels/sh_encode/sh_encode.h's. A block owns tiles of kThreadsPerBlock
// directions (grid-stride over tiles, 64-bit indices): each thread evaluates
// one direction into shared memory (row stride D*D + 1, free of bank
// conflicts), and the tile's [m, D*D] values leave (or, backward, the
// upstream gradient arrives) in coalesced rows instead of per-thread strides
// of D*D elements.
#include <type_traits>

#include "kernels/sh_encode/sh_encode.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

constexpr int kTile = kThreadsPerBlock;

// body(base, m) for each tile [base, base + m) of this block (m <= kTile), then
// a barrier, so the shared tile can be refilled.
template <typename Body>
__device__ __forceinline__ void ForEachTile(int64_t n, Body&& body) {
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTile; base < n;
       base += static_cast<int64_t>(gridDim.x) * kTile) {
    body(base, static_cast<int>(n - base < kTile ? n - base : kTile));
    __syncthreads();
  }
}

template <int D, typename T>
__global__ void __launch_bounds__(kTile) SHEncodeForwardKernel(const T* __restrict__ dirs, T* __restrict__ values,
                                                               int64_t n) {
  constexpr int K = D * D, kRow = K + 1;
  __shared__ float tile[kTile * kRow];
  const int t = threadIdx.x;
  ForEachTile(n, [&](int64_t base, int m) {
    if (t < m) {
      const T* d = dirs + 3 * (base + t);
      sh_encode_values(static_cast<float>(d[0]), static_cast<float>(d[1]), static_cast<float>(d[2]), D,
                       tile + t * kRow, 1);
    }
    __syncthreads();
    T* out = values + base * K;
    for (int j = t; j < m * K; j += kTile) out[j] = T(tile[(j / K) * kRow + j % K]);
  });
}

template <int D, typename T>
__global__ void __launch_bounds__(kTile) SHEncodeBackwardKernel(const T* __restrict__ grad,
                                                                const T* __restrict__ dirs,
                                                                T* __restrict__ grad_dirs, int64_t n) {
  constexpr int K = D * D, kRow = K + 1;
  __shared__ float tile[kTile * kRow];
  const int t = threadIdx.x;
  ForEachTile(n, [&](int64_t base, int m) {
    const T* g = grad + base * K;
    for (int j = t; j < m * K; j += kTile) tile[(j / K) * kRow + j % K] = static_cast<float>(g[j]);
    __syncthreads();
    if (t < m) {
      const int64_t p = base + t;
      const T* d = dirs + 3 * p;
      float dx, dy, dz;
      sh_encode_grad(static_cast<float>(d[0]), static_cast<float>(d[1]), static_cast<float>(d[2]), D,
                     tile + t * kRow, 1, &dx, &dy, &dz);
      grad_dirs[3 * p] = T(dx);
      grad_dirs[3 * p + 1] = T(dy);
      grad_dirs[3 * p + 2] = T(dz);
    }
  });
}

// fn(std::integral_constant<int, degree>); cudaErrorInvalidValue outside 1..4.
template <typename Fn>
cudaError_t WithDegree(int degree, Fn&& fn) {
  switch (degree) {
    case 1: fn(std::integral_constant<int, 1>()); break;
    case 2: fn(std::integral_constant<int, 2>()); break;
    case 3: fn(std::integral_constant<int, 3>()); break;
    case 4: fn(std::integral_constant<int, 4>()); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t LaunchSHEncodeForward(const T* dirs, T* values, int64_t n, const sh_encode::Attrs& a,
                                  cudaStream_t stream) {
  const int degree = a.degree;
  if (n == 0) return degree >= 1 && degree <= MO_SH_MAX_DEGREE ? cudaSuccess : cudaErrorInvalidValue;
  return WithDegree(degree, [&](auto degree_constant) {
    constexpr int D = decltype(degree_constant)::value;
    SHEncodeForwardKernel<D, T><<<GridStrideBlocks(n, kTile), kTile, 0, stream>>>(dirs, values, n);
  });
}

template <typename T>
cudaError_t LaunchSHEncodeBackward(const T* grad, const T* dirs, T* grad_dirs, int64_t n, const sh_encode::Attrs& a,
                                   cudaStream_t stream) {
  const int degree = a.degree;
  if (n == 0) return degree >= 1 && degree <= MO_SH_MAX_DEGREE ? cudaSuccess : cudaErrorInvalidValue;
  return WithDegree(degree, [&](auto degree_constant) {
    constexpr int D = decltype(degree_constant)::value;
    SHEncodeBackwardKernel<D, T><<<GridStrideBlocks(n, kTile), kTile, 0, stream>>>(grad, dirs, grad_dirs, n);
  });
}

#define MO_INSTANTIATE_SH_ENCODE(T)                                                            \
  template cudaError_t LaunchSHEncodeForward<T>(const T*, T*, int64_t, const sh_encode::Attrs&, cudaStream_t); \
  template cudaError_t LaunchSHEncodeBackward<T>(const T*, const T*, T*, int64_t, const sh_encode::Attrs&,     \
                                                 cudaStream_t);
MO_INSTANTIATE_SH_ENCODE(float)
MO_INSTANTIATE_SH_ENCODE(__half)
#undef MO_INSTANTIATE_SH_ENCODE

}  // namespace cuda
}  // namespace mo
