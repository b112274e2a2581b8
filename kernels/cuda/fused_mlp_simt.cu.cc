// FusedMLP float32 on CUDA cores (the launchers are fused_mlp.cu.cc). One
// block owns a tile of kTile rows through every layer (tiny-cuda-nn's fully
// fused scheme): the tile's activations stay in shared memory, each layer's
// weights are staged in shared memory once per block. Activation formulas
// come from kernels/common/activations.h.
//
// Backward: one fused kernel walks the layers back per tile, writing dL/dz of
// every layer (and dx); the weight gradients are then X_l^T dZ_l, computed per
// row-split into partials (summed over the splits in a fixed order by the
// caller), so dW and db are bitwise deterministic (no atomics).
#include <algorithm>

#include "kernels/common/activations.h"
#include "kernels/cuda/fused_mlp_impl.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {
namespace {

constexpr int kTile = 128;     // rows per block
constexpr int kThreads = 256;  // 8 warps: the 128-row tile has 32+ 16x16 output tiles per layer
// Leading dimensions padded by one float against shared-memory bank conflicts.
constexpr int kLdPad = 1;
constexpr int kAccPad = 4;

// C[M,N] (float, row-major) (+)= A[M,K] B[K,N]; A/B column-major when *_COL.
// M, N, K multiples of 16. Every warp of the block takes 16x16 output tiles.
// float32: CUDA cores, each thread a strip of one output row (same row across
// a warp, so A reads broadcast and row-major B reads are consecutive).
template <bool A_COL, bool B_COL>
__device__ __forceinline__ void BlockMatmul(float* C, int ldc, const float* A, int lda,
                                            const float* B, int ldb, int M, int N, int K,
                                            bool accumulate) {
  for (int e = threadIdx.x; e < M * N; e += blockDim.x) {
    const int i = e / N, j = e % N;
    float acc = accumulate ? C[i * ldc + j] : 0.0f;
#pragma unroll 8
    for (int k = 0; k < K; ++k) {
      const float a = A_COL ? A[k * lda + i] : A[i * lda + k];
      const float b = B_COL ? B[j * ldb + k] : B[k * ldb + j];
      acc = fmaf(a, b, acc);
    }
    C[i * ldc + j] = acc;
  }
}

// Weight l into shared memory as [kp, np] row-major, zero-padded.
template <typename T>
__device__ __forceinline__ void StageWeights(T* w, int ldw, const T* __restrict__ g, int k, int kp,
                                             int nn, int np) {
  for (int e = threadIdx.x; e < kp * np; e += blockDim.x) {
    const int r = e / np, c = e % np;
    w[r * ldw + c] = (r < k && c < nn) ? g[r * nn + c] : T(0.0f);
  }
}

template <typename T>
struct SmemFwd {
  T* act;
  T* w;
  float* acc;
  float* bias;
  int lda, ldw, ldc;
};

template <typename T>
size_t ForwardSmemBytes(int d) {
  const int ld = d + kLdPad;
  return Align128(sizeof(T) * kTile * ld) + Align128(sizeof(T) * d * ld) +
         Align128(sizeof(float) * kTile * (d + kAccPad)) + Align128(sizeof(float) * d);
}

template <typename T>
__device__ SmemFwd<T> CarveForward(char* smem, int d) {
  SmemFwd<T> s;
  s.lda = s.ldw = d + kLdPad;
  s.ldc = d + kAccPad;
  s.act = reinterpret_cast<T*>(smem);
  smem += Align128(sizeof(T) * kTile * s.lda);
  s.w = reinterpret_cast<T*>(smem);
  smem += Align128(sizeof(T) * d * s.ldw);
  s.acc = reinterpret_cast<float*>(smem);
  smem += Align128(sizeof(float) * kTile * s.ldc);
  s.bias = reinterpret_cast<float*>(smem);
  return s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedMlpForwardKernel(const T* __restrict__ x, FusedMlpParams<T> p, T* __restrict__ y,
                          T* __restrict__ saved, FusedMlpShape s, Dims dm) {
  extern __shared__ __align__(128) char smem_raw[];
  SmemFwd<T> sm = CarveForward<T>(smem_raw, dm.d);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int matrices = s.hidden_layers + 1;
  for (int e = threadIdx.x; e < kTile * dm.in_p; e += blockDim.x) {
    const int r = e / dm.in_p, c = e % dm.in_p;
    const int64_t row = row0 + r;
    sm.act[r * sm.lda + c] = (row < s.n && c < s.in_dim) ? x[row * s.in_dim + c] : T(0.0f);
  }
  for (int l = 0; l < matrices; ++l) {
    int k, kp, nn, np;
    MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
    StageWeights(sm.w, sm.ldw, p.w[l], k, kp, nn, np);
    for (int c = threadIdx.x; c < np; c += blockDim.x) {
      sm.bias[c] = c < nn ? static_cast<float>(p.b[l][c]) : 0.0f;
    }
    __syncthreads();
    BlockMatmul<false, false>(sm.acc, sm.ldc, sm.act, sm.lda, sm.w, sm.ldw, kTile, np, kp, false);
    __syncthreads();
    const bool last = l == matrices - 1;
    const int act = last ? s.output_activation : s.activation;
    for (int e = threadIdx.x; e < kTile * np; e += blockDim.x) {
      const int r = e / np, c = e % np;
      const int64_t row = row0 + r;
      const T v = T(activation_forward(sm.acc[r * sm.ldc + c] + sm.bias[c], act, s.alpha));
      if (last) {
        if (row < s.n && c < nn) y[row * s.out_dim + c] = v;
      } else {
        sm.act[r * sm.lda + c] = v;
        if (saved != nullptr && row < s.n) saved[(l * s.n + row) * s.width + c] = v;
      }
    }
    __syncthreads();
  }
}

// Per-tile backward through every layer: dz of each layer (when weight
// gradients are wanted) and dx.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedMlpBackwardKernel(const T* __restrict__ dy, const T* __restrict__ y,
                           const T* __restrict__ saved, FusedMlpParams<T> p, T* __restrict__ dx,
                           DzBuffers<T> bufs, FusedMlpShape s, Dims dm) {
  extern __shared__ __align__(128) char smem_raw[];
  SmemFwd<T> sm = CarveForward<T>(smem_raw, dm.d);  // act holds dL/dz of the tile
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int matrices = s.hidden_layers + 1;
  {
    T* dz = bufs.dz[matrices - 1];
    for (int e = threadIdx.x; e < kTile * dm.out_p; e += blockDim.x) {
      const int r = e / dm.out_p, c = e % dm.out_p;
      const int64_t row = row0 + r;
      T v = T(0.0f);
      if (row < s.n && c < s.out_dim) {
        const int64_t i = row * s.out_dim + c;
        v = T(static_cast<float>(dy[i]) *
              activation_derivative_from_output(static_cast<float>(y[i]), s.output_activation,
                                                s.alpha));
      }
      sm.act[r * sm.lda + c] = v;
      if (dz != nullptr && row < s.n) dz[row * dm.out_p + c] = v;
    }
  }
  for (int l = matrices - 1; l >= 0; --l) {
    if (l == 0 && dx == nullptr) break;
    int k, kp, nn, np;
    MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
    StageWeights(sm.w, sm.ldw, p.w[l], k, kp, nn, np);
    __syncthreads();
    // dL/d(input of l) = dz_l W_l^T: W_l^T read as a column-major [np, kp].
    BlockMatmul<false, true>(sm.acc, sm.ldc, sm.act, sm.lda, sm.w, sm.ldw, kTile, kp, np, false);
    __syncthreads();
    if (l > 0) {
      T* dz = bufs.dz[l - 1];
      const T* yl = saved + static_cast<int64_t>(l - 1) * s.n * s.width;
      for (int e = threadIdx.x; e < kTile * s.width; e += blockDim.x) {
        const int r = e / s.width, c = e % s.width;
        const int64_t row = row0 + r;
        T v = T(0.0f);
        if (row < s.n) {
          v = T(sm.acc[r * sm.ldc + c] *
                activation_derivative_from_output(static_cast<float>(yl[row * s.width + c]),
                                                  s.activation, s.alpha));
          if (dz != nullptr) dz[row * s.width + c] = v;
        }
        sm.act[r * sm.lda + c] = v;
      }
    } else {
      for (int e = threadIdx.x; e < kTile * s.in_dim; e += blockDim.x) {
        const int r = e / s.in_dim, c = e % s.in_dim;
        const int64_t row = row0 + r;
        if (row < s.n) dx[row * s.in_dim + c] = T(sm.acc[r * sm.ldc + c]);
      }
    }
    __syncthreads();
  }
}

// Weight-gradient partials: block (split, l) sums X_l^T dz_l and the column
// sums of dz_l over its rows, in a fixed order.
template <typename T>
struct SmemWg {
  T* a;
  T* g;
  float* acc;
  int lda, ldg, ldc;
};

template <typename T>
size_t WgradSmemBytes(int d) {
  const int ld = d + kLdPad;
  return 2 * Align128(sizeof(T) * kTile * ld) + Align128(sizeof(float) * d * (d + kAccPad));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedMlpWgradKernel(const T* __restrict__ x, const T* __restrict__ saved, DzBuffers<T> bufs,
                        float* __restrict__ partials, int64_t rows_per_split, int64_t part_stride,
                        FusedMlpShape s, Dims dm) {
  extern __shared__ __align__(128) char smem_raw[];
  SmemWg<T> sm;
  sm.lda = sm.ldg = dm.d + kLdPad;
  sm.ldc = dm.d + kAccPad;
  char* ptr = smem_raw;
  sm.a = reinterpret_cast<T*>(ptr);
  ptr += Align128(sizeof(T) * kTile * sm.lda);
  sm.g = reinterpret_cast<T*>(ptr);
  ptr += Align128(sizeof(T) * kTile * sm.ldg);
  sm.acc = reinterpret_cast<float*>(ptr);

  const int l = blockIdx.y, matrices = s.hidden_layers + 1;
  int k, kp, nn, np;
  MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
  const T* dz = bufs.dz[l];
  const T* a = l == 0 ? x : saved + static_cast<int64_t>(l - 1) * s.n * s.width;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * rows_per_split;
  const int64_t end = std::min<int64_t>(s.n, begin + rows_per_split);
  float db = 0.0f;  // column threadIdx.x (np <= kThreads)
  bool first = true;
  for (int64_t r0 = begin; r0 < end; r0 += kTile) {
    for (int e = threadIdx.x; e < kTile * kp; e += blockDim.x) {
      const int r = e / kp, c = e % kp;
      const int64_t row = r0 + r;
      sm.a[r * sm.lda + c] = (row < end && c < k) ? a[row * k + c] : T(0.0f);
    }
    for (int e = threadIdx.x; e < kTile * np; e += blockDim.x) {
      const int r = e / np, c = e % np;
      const int64_t row = r0 + r;
      sm.g[r * sm.ldg + c] = row < end ? dz[row * np + c] : T(0.0f);
    }
    __syncthreads();
    if (threadIdx.x < np) {
      for (int r = 0; r < kTile; ++r) db += static_cast<float>(sm.g[r * sm.ldg + threadIdx.x]);
    }
    // X^T (column-major view of the row-major tile) times dz.
    BlockMatmul<true, false>(sm.acc, sm.ldc, sm.a, sm.lda, sm.g, sm.ldg, kp, np, kTile, !first);
    first = false;
    __syncthreads();
  }
  float* part = partials + (static_cast<int64_t>(l) * gridDim.x + blockIdx.x) * part_stride;
  for (int e = threadIdx.x; e < kp * np; e += blockDim.x) {
    const int r = e / np, c = e % np;
    part[e] = first ? 0.0f : sm.acc[r * sm.ldc + c];
  }
  if (threadIdx.x < np) part[kp * np + threadIdx.x] = db;
}

}  // namespace

cudaError_t Forward(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream) {
  const Dims dm = DimsOf(s);
  const size_t smem = ForwardSmemBytes<float>(dm.d);
  cudaError_t err = cudaFuncSetAttribute(FusedMlpForwardKernel<float>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const int64_t blocks = (s.n + kTile - 1) / kTile;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  FusedMlpForwardKernel<float><<<static_cast<unsigned int>(blocks), kThreads, smem, stream>>>(
      x, p, y, saved, s, dm);
  return cudaGetLastError();
}

cudaError_t Backward(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const DzBuffers<float>& bufs,
                         bool any_wgrad, float* partials, const WsLayout& ws, const FusedMlpShape& s,
                         cudaStream_t stream) {
  const Dims dm = DimsOf(s);
  const int matrices = s.hidden_layers + 1;
  const int64_t blocks = (s.n + kTile - 1) / kTile;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const size_t smem = ForwardSmemBytes<float>(dm.d);
  cudaError_t err = cudaFuncSetAttribute(FusedMlpBackwardKernel<float>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  FusedMlpBackwardKernel<float><<<static_cast<unsigned int>(blocks), kThreads, smem, stream>>>(
      dy, y, saved, p, dx, bufs, s, dm);
  err = cudaGetLastError();
  if (err != cudaSuccess || !any_wgrad) return err;
  const int64_t rows_per_split = (s.n + ws.splits - 1) / ws.splits;
  const int64_t rps = (rows_per_split + kTile - 1) / kTile * kTile;
  const size_t wsmem = WgradSmemBytes<float>(dm.d);
  err = cudaFuncSetAttribute(FusedMlpWgradKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(wsmem));
  if (err != cudaSuccess) return err;
  FusedMlpWgradKernel<float><<<dim3(ws.splits, matrices), kThreads, wsmem, stream>>>(
      x, saved, bufs, partials, rps, ws.part_stride, s, dm);
  return cudaGetLastError();
}

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo
