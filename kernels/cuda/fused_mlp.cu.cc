// FusedMLP CUDA kernels. One block owns a tile of kTile rows through every
// layer (tiny-cuda-nn's fully fused scheme): the tile's activations stay in
// shared memory, each layer's weights are staged in shared memory once per
// block, and the matrix products run on tensor cores (WMMA 16x16x16, float
// accumulation) for __half, on CUDA cores for float. Activation formulas come
// from kernels/common/activations.h.
//
// Backward: one fused kernel walks the layers back per tile, writing dL/dz of
// every layer (and dx); the weight gradients are then X_l^T dZ_l, computed per
// row-split into partials and summed over the splits in a fixed order, so dW
// and db are bitwise deterministic (no atomics).
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "kernels/common/activations.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/fused_mlp.h"

namespace mo {
namespace cuda {
namespace {

constexpr int kTile = 128;     // rows per block
constexpr int kThreads = 256;  // 8 warps: the 128-row tile has 32+ 16x16 output tiles per layer
constexpr int kMaxSplits = 512;

int Pad16(int v) { return (v + 15) / 16 * 16; }

// Leading dimensions padded against shared-memory bank conflicts; WMMA needs
// multiples of 8 halves / 4 floats.
template <typename T>
struct Ld {
  static constexpr int kPad = 8;
};
template <>
struct Ld<float> {
  static constexpr int kPad = 1;
};
constexpr int kAccPad = 4;

__host__ __device__ inline size_t Align128(size_t b) { return (b + 127) / 128 * 128; }

// C[M,N] (float, row-major) (+)= A[M,K] B[K,N]; A/B column-major when *_COL.
// M, N, K multiples of 16. Every warp of the block takes 16x16 output tiles.
template <bool A_COL, bool B_COL>
__device__ __forceinline__ void BlockMatmul(float* C, int ldc, const __half* A, int lda,
                                            const __half* B, int ldb, int M, int N, int K,
                                            bool accumulate) {
  using namespace nvcuda;
  using ALayout = typename std::conditional<A_COL, wmma::col_major, wmma::row_major>::type;
  using BLayout = typename std::conditional<B_COL, wmma::col_major, wmma::row_major>::type;
  const int warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const int tn = N / 16, tiles = (M / 16) * tn;
  for (int t = warp; t < tiles; t += nwarps) {
    const int i = (t / tn) * 16, j = (t % tn) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    if (accumulate) {
      wmma::load_matrix_sync(c, C + i * ldc + j, ldc, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(c, 0.0f);
    }
    for (int k = 0; k < K; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, ALayout> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, BLayout> b;
      wmma::load_matrix_sync(a, A_COL ? A + k * lda + i : A + i * lda + k, lda);
      wmma::load_matrix_sync(b, B_COL ? B + j * ldb + k : B + k * ldb + j, ldb);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + i * ldc + j, c, ldc, wmma::mem_row_major);
  }
}

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

struct Dims {
  int in_p, out_p, d;  // padded input/output widths, max(width, in_p, out_p)
};

Dims DimsOf(const FusedMlpShape& s) {
  Dims d;
  d.in_p = Pad16(s.in_dim);
  d.out_p = Pad16(s.out_dim);
  d.d = std::max(s.width, std::max(d.in_p, d.out_p));
  return d;
}

// Matrix l: rows (true, padded), cols (true, padded).
__host__ __device__ inline void MatrixDims(int l, int matrices, int in_dim, int in_p, int width,
                                           int out_dim, int out_p, int* k, int* kp, int* nn,
                                           int* np) {
  *k = l == 0 ? in_dim : width;
  *kp = l == 0 ? in_p : width;
  *nn = l == matrices - 1 ? out_dim : width;
  *np = l == matrices - 1 ? out_p : width;
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
  const int ld = d + Ld<T>::kPad;
  return Align128(sizeof(T) * kTile * ld) + Align128(sizeof(T) * d * ld) +
         Align128(sizeof(float) * kTile * (d + kAccPad)) + Align128(sizeof(float) * d);
}

template <typename T>
__device__ SmemFwd<T> CarveForward(char* smem, int d) {
  SmemFwd<T> s;
  s.lda = s.ldw = d + Ld<T>::kPad;
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
struct DzBuffers {
  T* dz[kFusedMlpMaxMatrices];  // [n, np_l] each; null when not needed
};

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
  const int ld = d + Ld<T>::kPad;
  return 2 * Align128(sizeof(T) * kTile * ld) + Align128(sizeof(float) * d * (d + kAccPad));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedMlpWgradKernel(const T* __restrict__ x, const T* __restrict__ saved, DzBuffers<T> bufs,
                        float* __restrict__ partials, int64_t rows_per_split, int64_t part_stride,
                        FusedMlpShape s, Dims dm) {
  extern __shared__ __align__(128) char smem_raw[];
  SmemWg<T> sm;
  sm.lda = sm.ldg = dm.d + Ld<T>::kPad;
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

template <typename T>
__global__ void FusedMlpWgradReduceKernel(const float* __restrict__ partials, int splits,
                                          int64_t part_stride, FusedMlpGrads<T> g, FusedMlpShape s,
                                          Dims dm) {
  const int l = blockIdx.y, matrices = s.hidden_layers + 1;
  int k, kp, nn, np;
  MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
  const float* base = partials + static_cast<int64_t>(l) * splits * part_stride;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < kp * np + np;
       e += gridDim.x * blockDim.x) {
    const bool is_b = e >= kp * np;
    const int r = is_b ? 0 : e / np, c = is_b ? e - kp * np : e % np;
    if (c >= nn || r >= k) continue;
    if (is_b ? g.db[l] == nullptr : g.dw[l] == nullptr) continue;
    float sum = 0.0f;
    for (int sp = 0; sp < splits; ++sp) sum += base[sp * part_stride + e];
    if (is_b) {
      g.db[l][c] = T(sum);
    } else {
      g.dw[l][r * nn + c] = T(sum);
    }
  }
}

bool ShapeOk(const FusedMlpShape& s) {
  return s.n >= 0 && s.in_dim >= 1 && s.in_dim <= kFusedMlpMaxIoWidth && s.out_dim >= 1 &&
         s.out_dim <= kFusedMlpMaxIoWidth && s.hidden_layers >= 1 &&
         s.hidden_layers + 1 <= kFusedMlpMaxMatrices &&
         (s.width == 16 || s.width == 32 || s.width == 64 || s.width == 128);
}

int Splits(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (n + kTile - 1) / kTile)));
}

struct WsLayout {
  size_t dz_off[kFusedMlpMaxMatrices];
  size_t part_off;
  int splits;
  int64_t part_stride;
  size_t total;
};

WsLayout Layout(const FusedMlpShape& s, size_t elem) {
  const Dims dm = DimsOf(s);
  WsLayout w;
  size_t off = 0;
  const int matrices = s.hidden_layers + 1;
  for (int l = 0; l < matrices; ++l) {
    const int np = l == matrices - 1 ? dm.out_p : s.width;
    w.dz_off[l] = off;
    off += Align128(elem * static_cast<size_t>(s.n) * np);
  }
  w.splits = Splits(s.n);
  w.part_stride = static_cast<int64_t>(dm.d) * dm.d + dm.d;
  w.part_off = off;
  off += Align128(sizeof(float) * static_cast<size_t>(matrices) * w.splits * w.part_stride);
  w.total = off;
  return w;
}

}  // namespace

size_t FusedMlpBackwardWorkspaceBytes(const FusedMlpShape& s, size_t elem_size) {
  if (!ShapeOk(s)) return 0;
  return Layout(s, elem_size).total;
}

template <typename T>
cudaError_t LaunchFusedMlpForward(const T* x, const FusedMlpParams<T>& p, T* y, T* saved,
                                  const FusedMlpShape& s, cudaStream_t stream) {
  if (!ShapeOk(s)) return cudaErrorInvalidValue;
  if (s.n == 0) return cudaSuccess;
  const Dims dm = DimsOf(s);
  const size_t smem = ForwardSmemBytes<T>(dm.d);
  cudaError_t err = cudaFuncSetAttribute(FusedMlpForwardKernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const int64_t blocks = (s.n + kTile - 1) / kTile;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  FusedMlpForwardKernel<T><<<static_cast<unsigned int>(blocks), kThreads, smem, stream>>>(
      x, p, y, saved, s, dm);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchFusedMlpBackward(const T* dy, const T* x, const T* y, const T* saved,
                                   const FusedMlpParams<T>& p, T* dx, const FusedMlpGrads<T>& g,
                                   void* workspace, const FusedMlpShape& s, cudaStream_t stream) {
  if (!ShapeOk(s)) return cudaErrorInvalidValue;
  const int matrices = s.hidden_layers + 1;
  const Dims dm = DimsOf(s);
  bool any_wgrad = false;
  for (int l = 0; l < matrices; ++l) any_wgrad = any_wgrad || g.dw[l] != nullptr || g.db[l] != nullptr;
  if (s.n == 0) {
    // Empty batch: gradients of the parameters are zeros.
    for (int l = 0; l < matrices; ++l) {
      const int k = l == 0 ? s.in_dim : s.width, nn = l == matrices - 1 ? s.out_dim : s.width;
      cudaError_t err = cudaSuccess;
      if (g.dw[l] != nullptr) err = cudaMemsetAsync(g.dw[l], 0, sizeof(T) * k * nn, stream);
      if (err == cudaSuccess && g.db[l] != nullptr) err = cudaMemsetAsync(g.db[l], 0, sizeof(T) * nn, stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }
  if (!any_wgrad && dx == nullptr) return cudaSuccess;
  const WsLayout ws = Layout(s, sizeof(T));
  char* base = static_cast<char*>(workspace);
  DzBuffers<T> bufs;
  for (int l = 0; l < kFusedMlpMaxMatrices; ++l) {
    bufs.dz[l] = (any_wgrad && l < matrices) ? reinterpret_cast<T*>(base + ws.dz_off[l]) : nullptr;
  }
  const int64_t blocks = (s.n + kTile - 1) / kTile;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const size_t smem = ForwardSmemBytes<T>(dm.d);
  cudaError_t err = cudaFuncSetAttribute(FusedMlpBackwardKernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  FusedMlpBackwardKernel<T><<<static_cast<unsigned int>(blocks), kThreads, smem, stream>>>(
      dy, y, saved, p, dx, bufs, s, dm);
  err = cudaGetLastError();
  if (err != cudaSuccess || !any_wgrad) return err;

  float* partials = reinterpret_cast<float*>(base + ws.part_off);
  const int64_t rows_per_split = (s.n + ws.splits - 1) / ws.splits;
  const int64_t rps = (rows_per_split + kTile - 1) / kTile * kTile;
  const size_t wsmem = WgradSmemBytes<T>(dm.d);
  err = cudaFuncSetAttribute(FusedMlpWgradKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(wsmem));
  if (err != cudaSuccess) return err;
  FusedMlpWgradKernel<T><<<dim3(ws.splits, matrices), kThreads, wsmem, stream>>>(
      x, saved, bufs, partials, rps, ws.part_stride, s, dm);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int red_blocks = static_cast<int>((ws.part_stride + 255) / 256);
  FusedMlpWgradReduceKernel<T><<<dim3(red_blocks, matrices), 256, 0, stream>>>(
      partials, ws.splits, ws.part_stride, g, s, dm);
  return cudaGetLastError();
}

#define MO_INSTANTIATE(T)                                                                          \
  template cudaError_t LaunchFusedMlpForward<T>(const T*, const FusedMlpParams<T>&, T*, T*,       \
                                                const FusedMlpShape&, cudaStream_t);              \
  template cudaError_t LaunchFusedMlpBackward<T>(const T*, const T*, const T*, const T*,          \
                                                 const FusedMlpParams<T>&, T*,                    \
                                                 const FusedMlpGrads<T>&, void*,                  \
                                                 const FusedMlpShape&, cudaStream_t);
MO_INSTANTIATE(float)
MO_INSTANTIATE(__half)
#undef MO_INSTANTIATE

}  // namespace cuda
}  // namespace mo
