// FusedMLP's TF32 layer path (fused_mlp_layers.cu.cc, s.tf32): the backward
// kernels that take the place of a layer's cuBLAS products, on TF32 tensor
// cores (Tf32Mma, fused_mlp_mma.h): DreluProductTf32, the ReLU backward
// through a hidden layer with its db and dW, and InputBackwardTf32, the input
// layer's dx and dW.
// A translation unit of its own: TF32 mma.sync kernels that only the layer
// path launches, compiled apart from the fused kernels (fused_mlp_mma.cu.cc)
// so that each unit's instruction choice and build time stay its own.
#include <algorithm>
#include <cstdint>

#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/fused_mlp/fused_mlp_mma.h"
#include "kernels/cuda/sum_parts.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {
namespace {

// ---- the TF32 layer path's ReLU backward through one layer -------------------
//
// out = (dz W^T) * (h > 0) with dz [n, k], W [width, k] and h, out [n, width]:
// cuBLAS's product plus the derivative pass in one read of dz and h and one
// write of out, and each block's column sums of out (the layer's db) in
// shared memory, summed over blocks in order by LaunchSumParts. Every warp
// takes 16 rows at a time; A fragments come straight from global memory in
// Tf32Mma's k order (k-slots t, t+4 = columns 2t, 2t+1: one 8-byte load per
// row), W sits in shared memory as the backward's B (row major,
// Tf32Mma::Ld(k, false)), so LoadB serves it.

constexpr int kDreluWarps = 8;

__host__ __device__ inline int DreluLdw(int k) { return Tf32Mma::Ld((k + 15) / 16 * 16, false); }

template <int W>
__global__ void __launch_bounds__(32 * kDreluWarps, 2)
    DreluProductKernel(const float* __restrict__ dz, int k, const float* __restrict__ w,
                       const float* __restrict__ h, float* __restrict__ out, float* __restrict__ partials,
                       int64_t n) {
  constexpr int kNt = W / 8;     // n8 tiles of the output
  constexpr int kAhead = 4;      // k-steps of A loads in flight
  extern __shared__ float smem[];
  const int ldw = DreluLdw(k);
  float* red = smem + W * ldw;  // [kDreluWarps][W]: each warp's column sums
  for (int e = threadIdx.x; e < W * k; e += blockDim.x) {
    smem[(e / k) * ldw + e % k] = __uint_as_float(Tf32(w[e]));
  }
  for (int e = threadIdx.x; e < kDreluWarps * W; e += blockDim.x) red[e] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int ksteps = k / 8;
  const int64_t tiles = (n + 15) / 16;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kDreluWarps + warp; tile < tiles;
       tile += static_cast<int64_t>(gridDim.x) * kDreluWarps) {
    const int64_t r0 = tile * 16 + g, r1 = r0 + 8;
    const bool v0 = r0 < n, v1 = r1 < n;
    // The ReLU derivative first, as bits (bit 2 nt + q: column nt * 8 + 2t + q
    // of row r0, r1): h's loads are all in flight before the accumulators
    // take their registers.
    uint32_t on[2] = {0u, 0u};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = half == 0 ? r0 : r1;
      if (!(half == 0 ? v0 : v1)) continue;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        const float2 hv = __ldg(reinterpret_cast<const float2*>(h + r * W + nt * 8 + 2 * t));
        on[half] |= (hv.x > 0.0f ? 1u : 0u) << (2 * nt) | (hv.y > 0.0f ? 1u : 0u) << (2 * nt + 1);
      }
    }
    // A of k-step kk: row r0 / r1, columns 8 kk + 2t, + 1 (zero past the rows or k).
    const float2* a0 = reinterpret_cast<const float2*>(dz + (v0 ? r0 : 0) * k) + t;
    const float2* a1 = reinterpret_cast<const float2*>(dz + (v1 ? r1 : 0) * k) + t;
    float2 lo[kAhead], hi[kAhead];
    auto load = [&](int kk, float2& l, float2& u) {
      l = v0 && kk < ksteps ? __ldg(a0 + kk * 4) : make_float2(0.0f, 0.0f);
      u = v1 && kk < ksteps ? __ldg(a1 + kk * 4) : make_float2(0.0f, 0.0f);
    };
#pragma unroll
    for (int i = 0; i < kAhead; ++i) load(i, lo[i], hi[i]);
    float acc[kNt][4] = {};
    for (int kb = 0; kb < ksteps; kb += kAhead) {
#pragma unroll
      for (int i = 0; i < kAhead; ++i) {
        if (kb + i >= ksteps) break;
        const uint32_t a[4] = {Tf32(lo[i].x), Tf32(hi[i].x), Tf32(lo[i].y), Tf32(hi[i].y)};
        load(kb + i + kAhead, lo[i], hi[i]);
#pragma unroll
        for (int j = 0; j < kNt / 2; ++j) {
          uint32_t b[4];
          Tf32Mma::LoadB<false>(b, smem, ldw, kb + i, j, lane);
          Tf32Mma::Mma(acc[2 * j], a, b[0], b[1]);
          Tf32Mma::Mma(acc[2 * j + 1], a, b[2], b[3]);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      float2 o[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        o[half] = make_float2((on[half] >> (2 * nt)) & 1u ? acc[nt][2 * half] : 0.0f,
                              (on[half] >> (2 * nt + 1)) & 1u ? acc[nt][2 * half + 1] : 0.0f);
        if (half == 0 ? v0 : v1) *reinterpret_cast<float2*>(out + (half == 0 ? r0 : r1) * W + nt * 8 + 2 * t) = o[half];
      }
      if (partials != nullptr) {
        // This tile's column sums, over the rows (g) by shuffles, into the
        // warp's row of red: a fixed order, no registers held across tiles.
        float2 v = make_float2(o[0].x + o[1].x, o[0].y + o[1].y);
#pragma unroll
        for (int m = 4; m < 32; m <<= 1) {
          v.x += __shfl_xor_sync(0xffffffffu, v.x, m);
          v.y += __shfl_xor_sync(0xffffffffu, v.y, m);
        }
        if (g == 0) {
          red[warp * W + nt * 8 + 2 * t] += v.x;
          red[warp * W + nt * 8 + 2 * t + 1] += v.y;
        }
      }
    }
  }
  if (partials == nullptr) return;
  __syncthreads();
  for (int c = threadIdx.x; c < W; c += blockDim.x) {
    float sum = 0.0f;
    for (int wp = 0; wp < kDreluWarps; ++wp) sum += red[wp * W + c];
    partials[static_cast<int64_t>(blockIdx.x) * W + c] = sum;
  }
}

template <int W>
struct DreluLaunch {
  static cudaError_t Run(const float* dz, int k, const float* w, const float* h, float* out, float* db,
                         float* partials, int64_t n, cudaStream_t stream) {
    DeviceLimits d;
    cudaError_t err = QueryDevice(&d);
    if (err != cudaSuccess) return err;
    const size_t smem = sizeof(float) * (static_cast<size_t>(W) * DreluLdw(k) + kDreluWarps * W);
    if (smem > static_cast<size_t>(d.smem_optin)) return cudaErrorInvalidConfiguration;
    err = cudaFuncSetAttribute(DreluProductKernel<W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    const int64_t tiles = (n + 15) / 16;
    const int blocks = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>({static_cast<int64_t>(2) * d.sms, kMaxDreluBlocks,
                              (tiles + kDreluWarps - 1) / kDreluWarps})));
    DreluProductKernel<W><<<blocks, 32 * kDreluWarps, smem, stream>>>(dz, k, w, h, out,
                                                                     db != nullptr ? partials : nullptr, n);
    err = cudaGetLastError();
    if (err != cudaSuccess || db == nullptr) return err;
    return LaunchSumParts(partials, blocks, W, db, stream);
  }
};

// ---- the layer path's staged backward: a layer's dz' and its dW in one read --
//
// Through a hidden ReLU layer: out = (dz W^T) * (h > 0) and db as above, and
// dW = h^T dz ([width, k], the gradient of the W above, whose input is h)
// from the same rows of dz and h, instead of a GEMM that reads them again.
// Through the input layer (kRelu false, h = x): dx = dz W^T and dW = x^T dz.
// The block stages kChunk rows of h and dz at a time in shared memory
// (cp.async, two chunks in flight) and gives them to the tensor cores as they
// are, truncated to TF32 as cuBLAS's TF32 GEMMs of this path truncate theirs
// (W is rounded, once). Its warps split the work: the first kDwProductWarps
// take the product, 32 rows x 32 columns of out each (LoadA from the staged
// dz, W as above, the ReLU mask from the staged h); the others take dW, 32 x
// 64 tiles accumulated in registers over the block's chunks (the fused
// backward's WgradA / WgradB fragments). Tiles this large keep the
// shared-memory traffic per row below what DRAM delivers. dW and db go to
// per-block partials, summed in block order by LaunchSumParts: deterministic
// on one GPU. The grid is one block per SM whatever is wanted, so a gradient
// asked for alone has the full backward's bits.

constexpr int kDwWarps = 16;
constexpr int kDwProductWarps = 8;
constexpr int kDwStages = 2;

template <int W, int kChunk>
struct StagedBackwardShape {
  // The product: row groups of 32 and column groups of kPc.
  static constexpr int kPc = W < 32 ? W : 32;
  static constexpr int kPn = kPc / 16;  // n16 tiles of a column group
  static constexpr int kRowGroups = kChunk / 32;
  static_assert(kRowGroups * (W / kPc) <= kDwProductWarps, "one product tile per warp");
  // dW: 16 kMq rows (h columns) x 64 columns (dz columns) per warp.
  static constexpr int kMq = W < 32 ? 1 : 2;
  static constexpr int kNq = 4;
  static constexpr int kMBlocks = W / (16 * kMq);
  static_assert(kMBlocks * 2 <= kDwWarps - kDwProductWarps, "k <= 128: two 64-column blocks");
  static constexpr int kLdh = W + Tf32Mma::kSkew;
  static __host__ __device__ int Kp(int k) { return (k + 15) / 16 * 16; }
  static __host__ __device__ int LdDz(int k) { return Kp(k) + Tf32Mma::kSkew; }
  static __host__ __device__ int StageFloats(int k) { return kChunk * (kLdh + LdDz(k)); }
  static size_t SmemBytes(int k) {
    return sizeof(float) * (static_cast<size_t>(W) * DreluLdw(k) + kDwStages * StageFloats(k));
  }
};

// out may be null (dW alone), dw_parts null (no dW), db_parts null (no db).
// K > 0: k is K, its loops and divisions fixed. !kRelu: out = dz W^T as it
// is (the input layer's dx, with h = x).
template <int W, int kChunk, int K, bool kRelu>
__global__ void __launch_bounds__(32 * kDwWarps, 1)
    StagedBackwardKernel(const float* __restrict__ dz, int k_arg, const float* __restrict__ w,
                         const float* __restrict__ h, float* __restrict__ out, float* __restrict__ db_parts,
                         float* __restrict__ dw_parts, int64_t n) {
  using S = StagedBackwardShape<W, kChunk>;
  const int k = K > 0 ? K : k_arg;
  extern __shared__ __align__(128) float smem[];
  const int ldw = DreluLdw(k), kp = S::Kp(k), lddz = S::LdDz(k);
  float* const stage0 = smem + W * ldw;
  for (int e = threadIdx.x; e < W * k; e += blockDim.x) {
    smem[(e / k) * ldw + e % k] = __uint_as_float(Tf32(w[e]));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int mine = blockIdx.x < chunks ? static_cast<int>((chunks - 1 - blockIdx.x) / gridDim.x) + 1 : 0;
  auto stage = [&](int i) { return stage0 + (i % kDwStages) * S::StageFloats(k); };
  auto row0 = [&](int i) { return (blockIdx.x + static_cast<int64_t>(i) * gridDim.x) * kChunk; };
  auto issue = [&](int i) {
    float* sh = stage(i);
    LoadRows(sh, S::kLdh, h, row0(i), kChunk, n, W, W, true, threadIdx.x, nullptr, kDwWarps * 32);
    LoadRows(sh + kChunk * S::kLdh, lddz, dz, row0(i), kChunk, n, k, kp, true, threadIdx.x, nullptr,
             kDwWarps * 32);
  };
  // Product warps: row group pr, columns pc .. pc + kPc.
  const bool product = warp < kDwProductWarps && warp < S::kRowGroups * (W / S::kPc) && out != nullptr;
  const int pr = warp % S::kRowGroups, pc = (warp / S::kRowGroups) * S::kPc;
  // dW warps: rows (h columns) m0 .. m0 + 16 kMq, columns n0 .. n0 + 64 (those < kp).
  const int dwarp = warp - kDwProductWarps;
  const int m0 = (dwarp % S::kMBlocks) * 16 * S::kMq, n0 = (dwarp / S::kMBlocks) * 16 * S::kNq;
  const bool wgrad = dw_parts != nullptr && warp >= kDwProductWarps && n0 < kp;
  // One register array for either role, so that the kernel needs the
  // registers of the larger (128 a thread at 16 warps): a dW warp's tile in
  // regs[0 .. kMq); a product warp's out tile of the chunk in regs[0] and the
  // column sums of out (columns 2t, 2t + 1 of each n8 tile) in regs[1].
  float regs[2][2 * S::kNq][4] = {};
  static_assert(2 * 2 * S::kPn <= 2 * S::kNq, "a product tile fits regs[0]");
#pragma unroll
  for (int i = 0; i < kDwStages - 1; ++i) {
    if (i < mine) issue(i);
    CpAsyncCommit();
  }
  for (int i = 0; i < mine; ++i) {
    if (i + kDwStages - 1 < mine) issue(i + kDwStages - 1);
    CpAsyncCommit();
    CpAsyncWait<kDwStages - 1>();
    __syncthreads();
    const float* sh = stage(i);
    const float* sd = sh + kChunk * S::kLdh;
    if (product) {
#pragma unroll
      for (int e = 0; e < 2 * S::kNq; ++e) regs[0][e][0] = regs[0][e][1] = regs[0][e][2] = regs[0][e][3] = 0.0f;
      auto acc = [&](int mt, int nt) -> float(&)[4] { return regs[0][mt * 2 * S::kPn + nt]; };
#pragma unroll 4
      for (int kk = 0; kk < k / 8; ++kk) {
        uint32_t a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Tf32Mma::LoadA<false>(a[mt], sd + (pr * 32 + mt * 16) * lddz, lddz, kk, lane);
        }
#pragma unroll
        for (int j = 0; j < S::kPn; ++j) {
          uint32_t b[4];
          Tf32Mma::LoadB<false>(b, smem, ldw, kk, pc / 16 + j, lane);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            Tf32Mma::Mma(acc(mt, 2 * j), a[mt], b[0], b[1]);
            Tf32Mma::Mma(acc(mt, 2 * j + 1), a[mt], b[2], b[3]);
          }
        }
      }
      const int64_t r0 = row0(i) + pr * 32 + g;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 2 * S::kPn; ++nt) {
          const int c = pc + nt * 8 + 2 * t;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = mt * 16 + 8 * half;
            float2 o = make_float2(acc(mt, nt)[2 * half], acc(mt, nt)[2 * half + 1]);
            if constexpr (kRelu) {
              const float2 hv = *reinterpret_cast<const float2*>(sh + (pr * 32 + r + g) * S::kLdh + c);
              o = make_float2(hv.x > 0.0f ? o.x : 0.0f, hv.y > 0.0f ? o.y : 0.0f);
            }
            if (r0 + r < n) *reinterpret_cast<float2*>(out + (r0 + r) * W + c) = o;
            regs[1][nt][0] += o.x;  // rows past n have h staged as zeros: o = 0
            regs[1][nt][1] += o.y;
          }
        }
      }
    } else if (wgrad) {
#pragma unroll
      for (int kk = 0; kk < kChunk / 8; ++kk) {
        uint32_t af[S::kMq][4];
#pragma unroll
        for (int mq = 0; mq < S::kMq; ++mq) Tf32Mma::WgradA<false>(af[mq], sh, S::kLdh, m0 + 16 * mq, kk, lane);
#pragma unroll
        for (int q = 0; q < S::kNq; ++q) {
          if (n0 + 16 * q < kp) {
            uint32_t b[4];
            Tf32Mma::WgradB<false>(b, sd, lddz, n0 + 16 * q, kk, lane);
#pragma unroll
            for (int mq = 0; mq < S::kMq; ++mq) {
              Tf32Mma::Mma(regs[mq][2 * q], af[mq], b[0], b[1]);
              Tf32Mma::Mma(regs[mq][2 * q + 1], af[mq], b[2], b[3]);
            }
          }
        }
      }
    }
    __syncthreads();
  }
  CpAsyncWait<0>();
  if (wgrad) {
    float* part = dw_parts + static_cast<int64_t>(blockIdx.x) * W * k;
#pragma unroll
    for (int mq = 0; mq < S::kMq; ++mq) {
#pragma unroll
      for (int nt = 0; nt < 2 * S::kNq; ++nt) {
        const int c = n0 + 8 * nt + 2 * t;
        if (c >= k) continue;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          *reinterpret_cast<float2*>(part + (m0 + 16 * mq + Tf32Mma::WgradRow(g, hr)) * k + c) =
              make_float2(regs[mq][nt][2 * hr], regs[mq][nt][2 * hr + 1]);
        }
      }
    }
  }
  if (db_parts == nullptr || out == nullptr) return;
  // Column sums over the rows (g) by shuffles, then over the row groups in a
  // fixed order, through the staging (idle by then).
  float* red = stage0;  // [kRowGroups][W]
  if (product) {
#pragma unroll
    for (int nt = 0; nt < 2 * S::kPn; ++nt) {
#pragma unroll
      for (int m = 4; m < 32; m <<= 1) {
        regs[1][nt][0] += __shfl_xor_sync(0xffffffffu, regs[1][nt][0], m);
        regs[1][nt][1] += __shfl_xor_sync(0xffffffffu, regs[1][nt][1], m);
      }
      if (g == 0) {
        red[pr * W + pc + nt * 8 + 2 * t] = regs[1][nt][0];
        red[pr * W + pc + nt * 8 + 2 * t + 1] = regs[1][nt][1];
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < W; c += blockDim.x) {
    float sum = 0.0f;
    for (int rg = 0; rg < S::kRowGroups; ++rg) sum += red[rg * W + c];
    db_parts[static_cast<int64_t>(blockIdx.x) * W + c] = sum;
  }
}

// kRelu: the ReLU backward through a hidden layer (K fixed when k == W);
// otherwise the input layer's dx and dW (K fixed when k == 128, a wide
// hidden layer).
template <int W, bool kRelu>
struct StagedBackwardLaunch {
  template <int kChunk, int K>
  static cudaError_t Go(const float* dz, int k, const float* w, const float* h, float* out, float* db, float* dw,
                        float* db_parts, float* dw_parts, int64_t n, const DeviceLimits& d, cudaStream_t stream) {
    const size_t smem = StagedBackwardShape<W, kChunk>::SmemBytes(k);
    cudaError_t err = cudaFuncSetAttribute(StagedBackwardKernel<W, kChunk, K, kRelu>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    const int grid = static_cast<int>(std::min<int64_t>(
        {static_cast<int64_t>(d.sms), kMaxStagedBackwardBlocks, (n + kChunk - 1) / kChunk}));
    StagedBackwardKernel<W, kChunk, K, kRelu><<<grid, 32 * kDwWarps, smem, stream>>>(
        dz, k, w, h, out, db != nullptr ? db_parts : nullptr, dw != nullptr ? dw_parts : nullptr, n);
    err = cudaGetLastError();
    if (err == cudaSuccess && dw != nullptr) err = LaunchSumParts(dw_parts, grid, static_cast<int64_t>(W) * k, dw, stream);
    if (err == cudaSuccess && db != nullptr) err = LaunchSumParts(db_parts, grid, W, db, stream);
    return err;
  }
  template <int kChunk>
  static cudaError_t At(const float* dz, int k, const float* w, const float* h, float* out, float* db, float* dw,
                        float* db_parts, float* dw_parts, int64_t n, const DeviceLimits& d, cudaStream_t stream) {
    constexpr int kFixed = kRelu ? W : 128;
    return k == kFixed ? Go<kChunk, kFixed>(dz, k, w, h, out, db, dw, db_parts, dw_parts, n, d, stream)
                       : Go<kChunk, 0>(dz, k, w, h, out, db, dw, db_parts, dw_parts, n, d, stream);
  }
  // Runs the kernel with the largest chunk whose staging fits the device (or
  // the rows asked for: FusedMlpShape::tf32_staged_rows); *ran false
  // (nothing queued) when none does.
  static cudaError_t Run(const float* dz, int k, const float* w, const float* h, float* out, float* db, float* dw,
                         float* db_parts, float* dw_parts, int64_t n, int rows, bool* ran, cudaStream_t stream) {
    *ran = false;
    if (rows < 0) return cudaSuccess;
    DeviceLimits d;
    cudaError_t err = QueryDevice(&d);
    if (err != cudaSuccess) return err;
    const size_t optin = static_cast<size_t>(d.smem_optin);
    if (rows != 32 && StagedBackwardShape<W, 64>::SmemBytes(k) <= optin) {
      *ran = true;
      return At<64>(dz, k, w, h, out, db, dw, db_parts, dw_parts, n, d, stream);
    }
    if (StagedBackwardShape<W, 32>::SmemBytes(k) <= optin) {
      *ran = true;
      return At<32>(dz, k, w, h, out, db, dw, db_parts, dw_parts, n, d, stream);
    }
    return cudaSuccess;
  }
};
template <int W>
using DreluWgradLaunch = StagedBackwardLaunch<W, true>;
template <int W>
using InputWgradLaunch = StagedBackwardLaunch<W, false>;

}  // namespace

cudaError_t DreluProductTf32(const float* dz, int k, const float* w, const float* h, float* out, float* db,
                             float* dw, float* db_parts, float* dw_parts, int64_t n, int width, int staged_rows,
                             bool* dw_done, cudaStream_t stream) {
  *dw_done = false;
  if (n == 0) return cudaSuccess;
  if (k <= 0 || k % 8 != 0 || k > kFusedMlpMaxIoWidth) return cudaErrorInvalidValue;
  bool ran = false;
  if (Aligned16(dz) && Aligned16(h)) {
    const cudaError_t err =
        DispatchWidth<DreluWgradLaunch>(width, dz, k, w, h, out, db, dw, db_parts, dw_parts, n, staged_rows, &ran,
                                        stream);
    if (err != cudaSuccess || ran) {
      *dw_done = ran && dw != nullptr;
      return err;
    }
  }
  return out != nullptr ? DispatchWidth<DreluLaunch>(width, dz, k, w, h, out, db, db_parts, n, stream) : cudaSuccess;
}

cudaError_t InputBackwardTf32(const float* dz, int k, const float* w, const float* x, float* dx, float* dw,
                              float* dw_parts, int64_t n, int in_dim, int staged_rows, bool* done,
                              cudaStream_t stream) {
  *done = false;
  // The kernel's template width is the input's here: a hidden width.
  if (n == 0 || k <= 0 || k % 8 != 0 || k > kFusedMlpMaxIoWidth || !fused_mlp::WidthSupported(in_dim) ||
      !Aligned16(dz) || !Aligned16(x)) {
    return cudaSuccess;
  }
  return DispatchWidth<InputWgradLaunch>(in_dim, dz, k, w, x, dx, nullptr, dw, nullptr, dw_parts, n, staged_rows,
                                         done, stream);
}

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo
