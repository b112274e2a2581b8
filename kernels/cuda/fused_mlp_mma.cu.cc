// FusedMLP float16 on tensor cores (the launchers are fused_mlp.cu.cc):
// mma.sync m16n8k16 with float accumulation. Activation formulas come from
// kernels/common/activations.h.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/activations.h"
#include "kernels/cuda/fused_mlp_impl.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {
namespace {

// ---- float16: tensor cores (mma.sync m16n8k16, float accumulation) -------------
//
// Every warp owns kRows = 16 * kMt rows of the batch and carries them through
// all layers in registers: a layer's float accumulators (the mma C fragment)
// get bias and activation in place and are repacked as the next layer's A
// fragment (C of n-tiles 2k, 2k+1 is exactly A of k-step k in the PTX fragment
// layouts), so activations never leave the registers between layers. Every
// weight matrix (and bias) sits in shared memory, loaded once per block of a
// persistent grid; B fragments come from it by ldmatrix (.trans for W, plain
// for W^T in the backward). Shared memory per warp: two row-staging buffers
// for coalesced 16-byte global loads/stores of x, y, the saved activations,
// dL/dz and dx. Input/output widths are runtime (k-steps and 16-column chunks
// looped); the hidden width is the template argument.

constexpr int kSkew = 8;        // halves of row padding: ldmatrix rows hit distinct banks
constexpr int kMaxWarps = 16;   // 512 threads: 128 registers per thread at most
constexpr int kWgWarps = 16;    // weight-gradient kernel
constexpr int kWgChunk = 64;    // rows per weight-gradient pipeline stage
constexpr int kWgStages = 3;    // chunks in flight per block

// m16 tiles per warp: 64 float accumulators per thread at every width
// (16 warps of 128 registers; the alternatives tried: docs/FUSED_MLP_GPU.md).
constexpr int MmaMTiles(int width) { return width >= 128 ? 1 : 128 / width; }

template <int W>
struct MmaTile {
  static constexpr int kMt = MmaMTiles(W);
  static constexpr int kRows = 16 * kMt;
  static constexpr int kNt = W / 8;   // n8 tiles of a hidden layer
  static constexpr int kKt = W / 16;  // k16 steps of a hidden layer
};

int MmaRowsPerWarp(int width) { return 16 * MmaMTiles(width); }

// Shared-memory plan of the forward/backward kernels, computed on the host.
struct MmaPlan {
  int kp[kFusedMlpMaxMatrices], np[kFusedMlpMaxMatrices];  // padded matrix dims
  int w_off[kFusedMlpMaxMatrices];  // halves; 0 for every matrix when streamed
  int b_off[kFusedMlpMaxMatrices];  // floats into the bias region
  int weight_bytes, bias_bytes;
  int stage_ld;     // halves per staging row
  int stage_bytes;  // one staging buffer of one warp
  int warps;
  int resident;     // every matrix in shared memory for the kernel's life
  int x_vec, y_vec, dx_vec, dy_vec;  // rows 16-byte aligned: cp.async / int4 paths
};

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Builds the plan; false when it cannot fit (never for the supported shapes).
bool MakeMmaPlan(const FusedMlpShape& s, int buffers, int smem_optin, MmaPlan* pl) {
  const Dims dm = DimsOf(s);
  const int matrices = s.hidden_layers + 1;
  int wbytes = 0, max_w = 0, bfloats = 0;
  for (int l = 0; l < matrices; ++l) {
    int k, kp, nn, np;
    MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
    pl->kp[l] = kp;
    pl->np[l] = np;
    const int bytes = static_cast<int>(Align128(sizeof(__half) * kp * (np + kSkew)));
    pl->w_off[l] = wbytes / static_cast<int>(sizeof(__half));
    wbytes += bytes;
    max_w = std::max(max_w, bytes);
    pl->b_off[l] = bfloats;
    bfloats += np;
  }
  pl->bias_bytes = static_cast<int>(Align128(sizeof(float) * bfloats));
  pl->stage_ld = dm.d + kSkew;
  pl->stage_bytes = static_cast<int>(Align128(sizeof(__half) * MmaRowsPerWarp(s.width) * pl->stage_ld));
  const int per_warp = buffers * pl->stage_bytes;
  // Resident when at least 8 warps fit beside all the weights; else one
  // matrix at a time (streamed, block-synchronous per layer).
  pl->resident = wbytes + pl->bias_bytes + 8 * per_warp <= smem_optin;
  pl->weight_bytes = pl->resident ? wbytes : max_w;
  if (!pl->resident) {
    for (int l = 0; l < matrices; ++l) pl->w_off[l] = 0;
  }
  const int avail = smem_optin - pl->weight_bytes - pl->bias_bytes;
  pl->warps = std::min(kMaxWarps, avail / per_warp);
  return pl->warps >= 1;
}

int MmaSmemBytes(const MmaPlan& pl, int buffers) {
  return pl.weight_bytes + pl.bias_bytes + pl.warps * buffers * pl.stage_bytes;
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, zero-filled when !valid.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float2 Unpack(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// Runs f(std::integral_constant<int, act>) with the activation as a constant
// (the op's activations, see ShapeOk), so per-element code has no switch.
template <typename F>
__device__ __forceinline__ void DispatchAct(int act, F&& f) {
  switch (act) {
    case kActNone: f(std::integral_constant<int, kActNone>()); break;
    case kActRelu: f(std::integral_constant<int, kActRelu>()); break;
    case kActLeakyRelu: f(std::integral_constant<int, kActLeakyRelu>()); break;
    case kActSigmoid: f(std::integral_constant<int, kActSigmoid>()); break;
    case kActSoftplus: f(std::integral_constant<int, kActSoftplus>()); break;
    default: f(std::integral_constant<int, kActTruncExp>()); break;  // ShapeOk admits no other
  }
}

template <int A>
__device__ __forceinline__ float ActF(float z, int, float alpha) {
  return activation_forward(z, A, alpha);
}
template <int A>
__device__ __forceinline__ float ActD(float y, int, float alpha) {
  return activation_derivative_from_output(y, A, alpha);
}

// B fragments of k-step kk and n-tiles 2j, 2j+1 (b[0..1], b[2..3]).
// TRANS: B = W stored [K][N] (forward). !TRANS: B = W^T with W stored [N][K].
template <bool TRANS>
__device__ __forceinline__ void LoadB(uint32_t (&b)[4], const __half* w, int ldw, int kk, int j,
                                      int lane) {
  if (TRANS) {
    Ldsm4T(b, w + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ldw + j * 16 + (lane >> 4) * 8);
  } else {
    Ldsm4(b, w + (j * 16 + (lane & 7) + (lane >> 4) * 8) * ldw + kk * 16 + ((lane >> 3) & 1) * 8);
  }
}

// acc[MT][NT] += A * B over k-step kk; a(mt) is the A fragment of m-tile mt.
template <int MT, int NT, bool TRANS, typename AFrag>
__device__ __forceinline__ void MmaKStep(float (&acc)[MT][NT][4], AFrag&& a, const __half* w, int ldw,
                                         int kk, int lane) {
#pragma unroll
  for (int j = 0; j < NT / 2; ++j) {
    uint32_t b[4];
    LoadB<TRANS>(b, w, ldw, kk, j, lane);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      Mma(acc[mt][2 * j], a(mt), b[0], b[1]);
      Mma(acc[mt][2 * j + 1], a(mt), b[2], b[3]);
    }
  }
}

// acc[MT][NT] += A (kRows x 16*ksteps, row-major in shared memory) * B.
template <int MT, int NT, bool TRANS>
__device__ __forceinline__ void MmaSmemA(float (&acc)[MT][NT][4], const __half* a, int lda,
                                         int ksteps, const __half* w, int ldw, int lane) {
  for (int kk = 0; kk < ksteps; ++kk) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      Ldsm4(af[mt], a + (mt * 16 + (lane & 15)) * lda + kk * 16 + (lane >> 4) * 8);
    }
    MmaKStep<MT, NT, TRANS>(acc, [&](int mt) -> const uint32_t(&)[4] { return af[mt]; }, w, ldw, kk, lane);
  }
}

// acc[MT][NT] += A (register fragments, KT k-steps) * B.
template <int MT, int KT, int NT, bool TRANS>
__device__ __forceinline__ void MmaRegA(float (&acc)[MT][NT][4], const uint32_t (&af)[MT][KT][4],
                                        const __half* w, int ldw, int lane) {
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    MmaKStep<MT, NT, TRANS>(acc, [&](int mt) -> const uint32_t(&)[4] { return af[mt][kk]; }, w, ldw, kk,
                            lane);
  }
}

// Accumulators start at the bias (columns 8j + 2t, 8j + 2t + 1), or zero.
template <int MT, int NT>
__device__ __forceinline__ void InitAcc(float (&acc)[MT][NT][4], const float* bias, int lane) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float b0 = bias ? bias[j * 8 + 2 * (lane & 3)] : 0.0f;
    const float b1 = bias ? bias[j * 8 + 2 * (lane & 3) + 1] : 0.0f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      acc[mt][j][0] = b0;
      acc[mt][j][1] = b1;
      acc[mt][j][2] = b0;
      acc[mt][j][3] = b1;
    }
  }
}

// af = half(act(acc)): C of n-tiles 2kk, 2kk+1 -> A of k-step kk.
template <int MT, int KT>
__device__ __forceinline__ void ActPack(uint32_t (&af)[MT][KT][4], const float (&acc)[MT][2 * KT][4],
                                        int act, float alpha) {
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float* c = acc[mt][2 * kk + h];
          af[mt][kk][2 * h] = Pack(ActF<A>(c[0], act, alpha), ActF<A>(c[1], act, alpha));
          af[mt][kk][2 * h + 1] = Pack(ActF<A>(c[2], act, alpha), ActF<A>(c[3], act, alpha));
        }
      }
    }
  });
}

// dz = half(acc * act'(h)), h the layer's saved output (kRows x 16*KT in
// shared memory; ldmatrix gives it in the A layout, matching the pairs of C).
template <int MT, int KT>
__device__ __forceinline__ void DerivPack(uint32_t (&dz)[MT][KT][4], const float (&acc)[MT][2 * KT][4],
                                          const __half* hs, int ld, int act, float alpha, int lane) {
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        uint32_t h[4];
        Ldsm4(h, hs + (mt * 16 + (lane & 15)) * ld + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float* c = acc[mt][2 * kk + q];
          const float2 h0 = Unpack(h[2 * q]), h1 = Unpack(h[2 * q + 1]);
          dz[mt][kk][2 * q] = Pack(c[0] * ActD<A>(h0.x, act, alpha), c[1] * ActD<A>(h0.y, act, alpha));
          dz[mt][kk][2 * q + 1] =
              Pack(c[2] * ActD<A>(h1.x, act, alpha), c[3] * ActD<A>(h1.y, act, alpha));
        }
      }
    }
  });
}

// A fragments -> staging rows (kRows x 16*KT).
template <int MT, int KT>
__device__ __forceinline__ void StoreFrags(__half* st, int ld, const uint32_t (&af)[MT][KT][4],
                                           int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      __half* p = st + (mt * 16 + g) * ld + kk * 16 + 2 * t;
      *reinterpret_cast<uint32_t*>(p) = af[mt][kk][0];
      *reinterpret_cast<uint32_t*>(p + 8 * ld) = af[mt][kk][1];
      *reinterpret_cast<uint32_t*>(p + 8) = af[mt][kk][2];
      *reinterpret_cast<uint32_t*>(p + 8 * ld + 8) = af[mt][kk][3];
    }
  }
}

// 16 output columns (two n-tiles) -> staging columns col0.., with activation.
template <int MT>
__device__ __forceinline__ void StoreChunk(__half* st, int ld, int col0, const float (&o)[MT][2][4],
                                           int act, float alpha, int lane) {
  const int g = lane >> 2, t = lane & 3;
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        __half* p = st + (mt * 16 + g) * ld + col0 + 8 * h + 2 * t;
        *reinterpret_cast<uint32_t*>(p) = Pack(ActF<A>(o[mt][h][0], act, alpha), ActF<A>(o[mt][h][1], act, alpha));
        *reinterpret_cast<uint32_t*>(p + 8 * ld) =
            Pack(ActF<A>(o[mt][h][2], act, alpha), ActF<A>(o[mt][h][3], act, alpha));
      }
    }
  });
}

// Rows [row0, row0 + rows) of a row-major [n, cols] matrix -> staging
// (cols_p >= cols columns, zero-padded; rows past n are zeros). vec: cp.async
// of 16-byte pieces (the caller waits), else element loads.
__device__ __forceinline__ void WarpLoadRows(__half* st, int ld, const __half* g, int64_t row0,
                                             int rows, int64_t n, int cols, int cols_p, bool vec,
                                             int lane) {
  if (vec) {
    const int per_row = cols / 8;
    for (int e = lane; e < rows * per_row; e += 32) {
      const int r = e / per_row, c = (e - r * per_row) * 8;
      const int64_t row = row0 + r;
      const bool ok = row < n;
      CpAsync16(st + r * ld + c, g + (ok ? row * cols + c : 0), ok);
    }
    if (cols_p > cols) {
      for (int e = lane; e < rows * (cols_p - cols); e += 32) {
        const int r = e / (cols_p - cols);
        st[r * ld + cols + (e - r * (cols_p - cols))] = __float2half(0.0f);
      }
    }
  } else {
    for (int e = lane; e < rows * cols_p; e += 32) {
      const int r = e / cols_p, c = e - r * cols_p;
      const int64_t row = row0 + r;
      st[r * ld + c] = (row < n && c < cols) ? g[row * cols + c] : __float2half(0.0f);
    }
  }
}

// Staging -> rows [row0, min(n, row0 + rows)) of a row-major [n, cols] matrix.
__device__ __forceinline__ void WarpStoreRows(__half* g, const __half* st, int ld, int64_t row0,
                                              int rows, int64_t n, int cols, bool vec, int lane) {
  const int valid = static_cast<int>(std::min<int64_t>(rows, n - row0));
  if (valid <= 0) return;
  if (vec) {
    const int per_row = cols / 8;
    for (int e = lane; e < valid * per_row; e += 32) {
      const int r = e / per_row, c = (e - r * per_row) * 8;
      *reinterpret_cast<int4*>(g + (row0 + r) * cols + c) = *reinterpret_cast<const int4*>(st + r * ld + c);
    }
  } else {
    for (int e = lane; e < valid * cols; e += 32) {
      const int r = e / cols, c = e - r * cols;
      g[(row0 + r) * cols + c] = st[r * ld + c];
    }
  }
}

// Matrix l into shared memory as [kp][np + kSkew], zero-padded (all threads).
__device__ __forceinline__ void LoadMatrix(__half* w, const __half* __restrict__ g, int k, int kp,
                                           int nn, int np) {
  const int ld = np + kSkew;
  for (int e = threadIdx.x; e < kp * np; e += blockDim.x) {
    const int r = e / np, c = e - r * np;
    w[r * ld + c] = (r < k && c < nn) ? g[r * nn + c] : __float2half(0.0f);
  }
}

__device__ __forceinline__ void LoadAllMatrices(__half* wsm, const FusedMlpParams<__half>& p,
                                                const FusedMlpShape& s, const MmaPlan& pl) {
  const int matrices = s.hidden_layers + 1;
  for (int l = 0; l < matrices; ++l) {
    const int k = l == 0 ? s.in_dim : s.width, nn = l == matrices - 1 ? s.out_dim : s.width;
    LoadMatrix(wsm + pl.w_off[l], p.w[l], k, pl.kp[l], nn, pl.np[l]);
  }
}

// Weight l for this layer: resident, or loaded now by the whole block.
__device__ __forceinline__ const __half* LayerWeights(__half* wsm, const FusedMlpParams<__half>& p,
                                                      const FusedMlpShape& s, const MmaPlan& pl,
                                                      int l) {
  if (!pl.resident) {
    const int matrices = s.hidden_layers + 1;
    const int k = l == 0 ? s.in_dim : s.width, nn = l == matrices - 1 ? s.out_dim : s.width;
    __syncthreads();
    LoadMatrix(wsm, p.w[l], k, pl.kp[l], nn, pl.np[l]);
    __syncthreads();
  }
  return wsm + pl.w_off[l];
}

template <int W>
__global__ void __launch_bounds__(32 * kMaxWarps)
    MmaForwardKernel(const __half* __restrict__ x, FusedMlpParams<__half> p, __half* __restrict__ y,
                     __half* __restrict__ saved, FusedMlpShape s, MmaPlan pl) {
  using Tl = MmaTile<W>;
  constexpr int MT = Tl::kMt, R = Tl::kRows, NT = Tl::kNt, KT = Tl::kKt;
  extern __shared__ __align__(128) char smem_raw[];
  __half* wsm = reinterpret_cast<__half*>(smem_raw);
  float* bsm = reinterpret_cast<float*>(smem_raw + pl.weight_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __half* xs = reinterpret_cast<__half*>(smem_raw + pl.weight_bytes + pl.bias_bytes +
                                         2 * warp * pl.stage_bytes);
  __half* st = xs + pl.stage_bytes / static_cast<int>(sizeof(__half));
  const int ld = pl.stage_ld;
  const int L = s.hidden_layers;
  for (int l = 0; l <= L; ++l) {
    for (int c = threadIdx.x; c < pl.np[l]; c += blockDim.x) {
      const int nn = l == L ? s.out_dim : s.width;
      bsm[pl.b_off[l] + c] = c < nn ? __half2float(p.b[l][c]) : 0.0f;
    }
  }
  if (pl.resident) LoadAllMatrices(wsm, p, s, pl);
  __syncthreads();

  const int64_t rows_per_block = static_cast<int64_t>(pl.warps) * R;
  const int64_t blocks = (s.n + rows_per_block - 1) / rows_per_block;
  int64_t blk = blockIdx.x;
  if (blk < blocks) {
    WarpLoadRows(xs, ld, x, blk * rows_per_block + warp * R, R, s.n, s.in_dim, pl.kp[0], pl.x_vec, lane);
    CpAsyncCommit();
  }
  for (; blk < blocks; blk += gridDim.x) {
    const int64_t row0 = blk * rows_per_block + warp * R;
    CpAsyncWait<0>();
    __syncwarp();
    float acc[MT][NT][4];
    uint32_t af[MT][KT][4];
    {
      const __half* w = LayerWeights(wsm, p, s, pl, 0);
      InitAcc(acc, bsm + pl.b_off[0], lane);
      MmaSmemA<MT, NT, true>(acc, xs, ld, pl.kp[0] / 16, w, pl.np[0] + kSkew, lane);
    }
    __syncwarp();
    // x of this warp's next tile streams in while the layers run.
    const int64_t next = blk + gridDim.x;
    if (next < blocks) {
      WarpLoadRows(xs, ld, x, next * rows_per_block + warp * R, R, s.n, s.in_dim, pl.kp[0], pl.x_vec,
                   lane);
    }
    CpAsyncCommit();
    ActPack(af, acc, s.activation, s.alpha);
    for (int l = 0;; ++l) {
      if (saved != nullptr) {
        __syncwarp();
        StoreFrags(st, ld, af, lane);
        __syncwarp();
        WarpStoreRows(saved + static_cast<int64_t>(l) * s.n * W, st, ld, row0, R, s.n, W, true, lane);
      }
      if (l + 1 == L) break;
      const __half* w = LayerWeights(wsm, p, s, pl, l + 1);
      InitAcc(acc, bsm + pl.b_off[l + 1], lane);
      MmaRegA<MT, KT, NT, true>(acc, af, w, W + kSkew, lane);
      ActPack(af, acc, s.activation, s.alpha);
    }
    const __half* w = LayerWeights(wsm, p, s, pl, L);
    const int ldw = pl.np[L] + kSkew;
    __syncwarp();
    for (int c = 0; c < pl.np[L]; c += 16) {
      float o[MT][2][4];
      InitAcc(o, bsm + pl.b_off[L] + c, lane);
      MmaRegA<MT, KT, 2, true>(o, af, w + c, ldw, lane);
      StoreChunk(st, ld, c, o, s.output_activation, s.alpha, lane);
    }
    __syncwarp();
    WarpStoreRows(y, st, ld, row0, R, s.n, s.out_dim, pl.y_vec, lane);
  }
  CpAsyncWait<0>();
}

template <int W>
__global__ void __launch_bounds__(32 * kMaxWarps)
    MmaBackwardKernel(const __half* __restrict__ dy, const __half* __restrict__ y,
                      const __half* __restrict__ saved, FusedMlpParams<__half> p,
                      __half* __restrict__ dx, DzBuffers<__half> bufs, FusedMlpShape s, MmaPlan pl) {
  using Tl = MmaTile<W>;
  constexpr int MT = Tl::kMt, R = Tl::kRows, NT = Tl::kNt, KT = Tl::kKt;
  extern __shared__ __align__(128) char smem_raw[];
  __half* wsm = reinterpret_cast<__half*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __half* ds = reinterpret_cast<__half*>(smem_raw + pl.weight_bytes + pl.bias_bytes +
                                         2 * warp * pl.stage_bytes);
  __half* hs = ds + pl.stage_bytes / static_cast<int>(sizeof(__half));
  const int ld = pl.stage_ld;
  const int L = s.hidden_layers, out_p = pl.np[L];
  if (pl.resident) LoadAllMatrices(wsm, p, s, pl);
  __syncthreads();

  const int64_t rows_per_block = static_cast<int64_t>(pl.warps) * R;
  const int64_t blocks = (s.n + rows_per_block - 1) / rows_per_block;
  for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const int64_t row0 = blk * rows_per_block + warp * R;
    // h_L (the last hidden output) streams in while dL/dz of the output is formed.
    WarpLoadRows(hs, ld, saved + static_cast<int64_t>(L - 1) * s.n * W, row0, R, s.n, W, W, true, lane);
    CpAsyncCommit();
    __syncwarp();
    if (pl.dy_vec) {  // out_dim == out_p here: 8 columns per 16-byte load
      DispatchAct(s.output_activation, [&](auto a) {
        constexpr int A = decltype(a)::value;
        const int per_row = out_p / 8;
        for (int e = lane; e < R * per_row; e += 32) {
          const int r = e / per_row, c = (e - r * per_row) * 8;
          const int64_t row = row0 + r;
          int4 out = make_int4(0, 0, 0, 0);
          if (row < s.n) {
            const int4 gv = *reinterpret_cast<const int4*>(dy + row * out_p + c);
            const int4 yv = *reinterpret_cast<const int4*>(y + row * out_p + c);
            const uint32_t* g32 = reinterpret_cast<const uint32_t*>(&gv);
            const uint32_t* y32 = reinterpret_cast<const uint32_t*>(&yv);
            uint32_t* o32 = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const float2 g2 = Unpack(g32[q]), y2 = Unpack(y32[q]);
              o32[q] = Pack(g2.x * ActD<A>(y2.x, 0, s.alpha), g2.y * ActD<A>(y2.y, 0, s.alpha));
            }
          }
          *reinterpret_cast<int4*>(ds + r * ld + c) = out;
        }
      });
    } else {
      for (int e = lane; e < R * out_p; e += 32) {
        const int r = e / out_p, c = e - r * out_p;
        const int64_t row = row0 + r;
        float v = 0.0f;
        if (row < s.n && c < s.out_dim) {
          const int64_t i = row * s.out_dim + c;
          v = __half2float(dy[i]) *
              activation_derivative_from_output(__half2float(y[i]), s.output_activation, s.alpha);
        }
        ds[r * ld + c] = __float2half(v);
      }
    }
    __syncwarp();
    if (bufs.dz[L] != nullptr) WarpStoreRows(bufs.dz[L], ds, ld, row0, R, s.n, out_p, true, lane);
    float acc[MT][NT][4];
    uint32_t dz[MT][KT][4];
    {
      const __half* w = LayerWeights(wsm, p, s, pl, L);
      InitAcc(acc, static_cast<const float*>(nullptr), lane);
      MmaSmemA<MT, NT, false>(acc, ds, ld, out_p / 16, w, out_p + kSkew, lane);
    }
    CpAsyncWait<0>();
    __syncwarp();
    DerivPack(dz, acc, hs, ld, s.activation, s.alpha, lane);  // dz of matrix L - 1
    for (int l = L - 1; l >= 1; --l) {
      __syncwarp();
      WarpLoadRows(hs, ld, saved + static_cast<int64_t>(l - 1) * s.n * W, row0, R, s.n, W, W, true, lane);
      CpAsyncCommit();
      if (bufs.dz[l] != nullptr) {
        StoreFrags(ds, ld, dz, lane);
        __syncwarp();
        WarpStoreRows(bufs.dz[l], ds, ld, row0, R, s.n, W, true, lane);
      }
      const __half* w = LayerWeights(wsm, p, s, pl, l);
      InitAcc(acc, static_cast<const float*>(nullptr), lane);
      MmaRegA<MT, KT, NT, false>(acc, dz, w, W + kSkew, lane);
      CpAsyncWait<0>();
      __syncwarp();
      DerivPack(dz, acc, hs, ld, s.activation, s.alpha, lane);  // dz of matrix l - 1
    }
    __syncwarp();
    if (bufs.dz[0] != nullptr) {
      StoreFrags(ds, ld, dz, lane);
      __syncwarp();
      WarpStoreRows(bufs.dz[0], ds, ld, row0, R, s.n, W, true, lane);
      __syncwarp();
    }
    if (dx != nullptr) {
      const __half* w = LayerWeights(wsm, p, s, pl, 0);
      for (int c = 0; c < pl.kp[0]; c += 16) {
        float o[MT][2][4];
        InitAcc(o, static_cast<const float*>(nullptr), lane);
        MmaRegA<MT, KT, 2, false>(o, dz, w + c * (W + kSkew), W + kSkew, lane);
        StoreChunk(ds, ld, c, o, kActNone, 0.0f, lane);
      }
      __syncwarp();
      WarpStoreRows(dx, ds, ld, row0, R, s.n, s.in_dim, pl.dx_vec, lane);
    }
    __syncwarp();
  }
}

// Weight-gradient partials on tensor cores: block (split, l) accumulates
// X_l^T dz_l over its rows in registers (16x16 output tiles spread over the
// warps), rows staged through a kWgStages-deep cp.async pipeline; db comes
// from the same mma with an all-ones A (column sums, fixed order). Partials
// are reduced over splits by FusedMlpWgradReduceKernel.
__global__ void __launch_bounds__(32 * kWgWarps, 2)
    MmaWgradKernel(const __half* __restrict__ x, const __half* __restrict__ saved, DzBuffers<__half> bufs,
                   float* __restrict__ partials, int64_t rows_per_split, int64_t part_stride,
                   FusedMlpShape s, MmaPlan pl) {
  constexpr int kMaxTiles = 64 / kWgWarps;  // (128/16)^2 tiles at most
  extern __shared__ __align__(128) char smem_raw[];
  const int l = blockIdx.y;
  const int kp = pl.kp[l], np = pl.np[l];
  const int k = l == 0 ? s.in_dim : s.width;
  const int lda = kp + kSkew, ldb = np + kSkew;
  const int stage_halves = kWgChunk * (lda + ldb);
  __half* const stage0 = reinterpret_cast<__half*>(smem_raw);
  const __half* a = l == 0 ? x : saved + static_cast<int64_t>(l - 1) * s.n * s.width;
  const bool a_vec = l == 0 ? pl.x_vec : true;
  const __half* dz = bufs.dz[l];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * rows_per_split;
  const int64_t end = std::min<int64_t>(s.n, begin + rows_per_split);
  const int tn = np / 16, tiles = (kp / 16) * tn;

  // Zero the padding columns of A once (cp.async never writes them).
  if (a_vec && kp > k) {
    for (int st = 0; st < kWgStages; ++st) {
      for (int e = threadIdx.x; e < kWgChunk * (kp - k); e += blockDim.x) {
        const int r = e / (kp - k);
        stage0[st * stage_halves + r * lda + k + (e - r * (kp - k))] = __float2half(0.0f);
      }
    }
  }
  auto issue = [&](int64_t r0, __half* sa) {
    __half* sb = sa + kWgChunk * lda;
    if (a_vec) {
      const int per_row = k / 8;
      for (int e = threadIdx.x; e < kWgChunk * per_row; e += blockDim.x) {
        const int r = e / per_row, c = (e - r * per_row) * 8;
        const bool ok = r0 + r < end;
        CpAsync16(sa + r * lda + c, a + (ok ? (r0 + r) * k + c : 0), ok);
      }
    } else {
      for (int e = threadIdx.x; e < kWgChunk * kp; e += blockDim.x) {
        const int r = e / kp, c = e - r * kp;
        sa[r * lda + c] = (r0 + r < end && c < k) ? a[(r0 + r) * k + c] : __float2half(0.0f);
      }
    }
    const int per_row = np / 8;
    for (int e = threadIdx.x; e < kWgChunk * per_row; e += blockDim.x) {
      const int r = e / per_row, c = (e - r * per_row) * 8;
      const bool ok = r0 + r < end;
      CpAsync16(sb + r * ldb + c, dz + (ok ? (r0 + r) * np + c : 0), ok);
    }
  };

  float acc[kMaxTiles][2][4];
#pragma unroll
  for (int i = 0; i < kMaxTiles; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      acc[i][h][0] = acc[i][h][1] = acc[i][h][2] = acc[i][h][3] = 0.0f;
    }
  }
  float dbacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  const bool db_warp = warp < tn;  // its tile 0 is (m0 = 0, n0 = 16 * warp)
  const uint32_t ones[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};  // half 1.0 pairs
  const int chunks = begin < end ? static_cast<int>((end - begin + kWgChunk - 1) / kWgChunk) : 0;
  // Every iteration commits one group (possibly empty), so wait_group
  // kWgStages - 1 means: chunk ch has landed.
#pragma unroll
  for (int st = 0; st < kWgStages - 1; ++st) {
    if (st < chunks) issue(begin + static_cast<int64_t>(st) * kWgChunk, stage0 + st * stage_halves);
    CpAsyncCommit();
  }
  for (int ch = 0; ch < chunks; ++ch) {
    const int ahead = ch + kWgStages - 1;
    if (ahead < chunks) {
      issue(begin + static_cast<int64_t>(ahead) * kWgChunk, stage0 + (ahead % kWgStages) * stage_halves);
    }
    CpAsyncCommit();
    CpAsyncWait<kWgStages - 1>();
    __syncthreads();
    const __half* sa = stage0 + (ch % kWgStages) * stage_halves;
    const __half* sb = sa + kWgChunk * lda;
#pragma unroll
    for (int i = 0; i < kMaxTiles; ++i) {
      const int t = warp + i * kWgWarps;
      if (t < tiles) {
        const int m0 = (t / tn) * 16, n0 = (t % tn) * 16;
#pragma unroll
        for (int kk = 0; kk < kWgChunk / 16; ++kk) {
          uint32_t af[4], b[4];
          // A = X^T: X rows are k, so ldmatrix.trans of [k][m] pieces.
          Ldsm4T(af, sa + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * lda + m0 + ((lane >> 3) & 1) * 8);
          Ldsm4T(b, sb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ldb + n0 + (lane >> 4) * 8);
          Mma(acc[i][0], af, b[0], b[1]);
          Mma(acc[i][1], af, b[2], b[3]);
          if (i == 0 && db_warp) {
            Mma(dbacc[0], ones, b[0], b[1]);
            Mma(dbacc[1], ones, b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();
  }
  CpAsyncWait<0>();
  float* part = partials + (static_cast<int64_t>(l) * gridDim.x + blockIdx.x) * part_stride;
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < kMaxTiles; ++i) {
    const int t = warp + i * kWgWarps;
    if (t < tiles) {
      const int m0 = (t / tn) * 16, n0 = (t % tn) * 16;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = n0 + 8 * h + 2 * tq;
        part[(m0 + g) * np + c] = acc[i][h][0];
        part[(m0 + g) * np + c + 1] = acc[i][h][1];
        part[(m0 + g + 8) * np + c] = acc[i][h][2];
        part[(m0 + g + 8) * np + c + 1] = acc[i][h][3];
      }
    }
  }
  if (db_warp && g == 0) {  // row 0 of the all-ones product: the column sums
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = warp * 16 + 8 * h + 2 * tq;
      part[kp * np + c] = dbacc[h][0];
      part[kp * np + c + 1] = dbacc[h][1];
    }
  }
}

int WgradSmemBytesMma(const MmaPlan& pl, int matrices) {
  int most = 0;
  for (int l = 0; l < matrices; ++l) {
    most = std::max(most, kWgStages * kWgChunk * (pl.kp[l] + pl.np[l] + 2 * kSkew) *
                              static_cast<int>(sizeof(__half)));
  }
  return most;
}

struct DeviceLimits {
  int sms, smem_optin;
};

cudaError_t QueryDevice(DeviceLimits* d) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  }
  return err;
}

// Persistent grid: as many blocks as fit on the device at once (or fewer).
template <typename K>
cudaError_t PersistentGrid(K kernel, int threads, int smem, int64_t work_blocks, const DeviceLimits& d,
                           unsigned int* grid) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (err != cudaSuccess) return err;
  *grid = static_cast<unsigned int>(
      std::max<int64_t>(1, std::min<int64_t>(work_blocks, static_cast<int64_t>(std::max(1, per_sm)) * d.sms)));
  return cudaSuccess;
}

// The one place where the runtime width becomes a template argument.
template <template <int> class F, typename... Args>
cudaError_t DispatchWidth(int width, Args&&... args) {
  switch (width) {
    case 16: return F<16>::Run(std::forward<Args>(args)...);
    case 32: return F<32>::Run(std::forward<Args>(args)...);
    case 64: return F<64>::Run(std::forward<Args>(args)...);
    case 128: return F<128>::Run(std::forward<Args>(args)...);
    default: return cudaErrorInvalidValue;
  }
}

// Launches a warp-rows kernel (forward or backward) on its persistent grid.
template <int W, typename K, typename... Args>
cudaError_t LaunchWarpRows(K kernel, const MmaPlan& pl, const FusedMlpShape& s, const DeviceLimits& d,
                           cudaStream_t stream, Args... args) {
  const int smem = MmaSmemBytes(pl, 2);
  const int64_t rows_per_block = static_cast<int64_t>(pl.warps) * MmaTile<W>::kRows;
  unsigned int grid = 0;
  cudaError_t err = PersistentGrid(kernel, 32 * pl.warps, smem,
                                   (s.n + rows_per_block - 1) / rows_per_block, d, &grid);
  if (err != cudaSuccess) return err;
  kernel<<<grid, 32 * pl.warps, smem, stream>>>(args...);
  return cudaGetLastError();
}

template <int W>
struct MmaForwardLaunch {
  static cudaError_t Run(const __half* x, const FusedMlpParams<__half>& p, __half* y, __half* saved,
                         const FusedMlpShape& s, MmaPlan pl, const DeviceLimits& d, cudaStream_t stream) {
    return LaunchWarpRows<W>(MmaForwardKernel<W>, pl, s, d, stream, x, p, y, saved, s, pl);
  }
};

template <int W>
struct MmaBackwardLaunch {
  static cudaError_t Run(const __half* dy, const __half* y, const __half* saved,
                         const FusedMlpParams<__half>& p, __half* dx, const DzBuffers<__half>& bufs,
                         const FusedMlpShape& s, MmaPlan pl, const DeviceLimits& d, cudaStream_t stream) {
    return LaunchWarpRows<W>(MmaBackwardKernel<W>, pl, s, d, stream, dy, y, saved, p, dx, bufs, s, pl);
  }
};

cudaError_t MmaPlanFor(const FusedMlpShape& s, const void* x, const void* y, const void* dx,
                       const void* dy, DeviceLimits* d, MmaPlan* pl) {
  cudaError_t err = QueryDevice(d);
  if (err != cudaSuccess) return err;
  if (!MakeMmaPlan(s, 2, d->smem_optin, pl)) return cudaErrorInvalidConfiguration;
  pl->x_vec = s.in_dim % 8 == 0 && Aligned16(x);
  pl->y_vec = s.out_dim % 8 == 0 && Aligned16(y);
  pl->dx_vec = s.in_dim % 8 == 0 && (dx == nullptr || Aligned16(dx));
  pl->dy_vec = s.out_dim % 16 == 0 && dy != nullptr && Aligned16(dy) && Aligned16(y);
  return cudaSuccess;
}

}  // namespace

cudaError_t Forward(const __half* x, const FusedMlpParams<__half>& p, __half* y, __half* saved,
                       const FusedMlpShape& s, cudaStream_t stream) {
  if (saved != nullptr && !Aligned16(saved)) return cudaErrorMisalignedAddress;
  DeviceLimits d;
  MmaPlan pl;
  cudaError_t err = MmaPlanFor(s, x, y, nullptr, nullptr, &d, &pl);
  if (err != cudaSuccess) return err;
  return DispatchWidth<MmaForwardLaunch>(s.width, x, p, y, saved, s, pl, d, stream);
}

cudaError_t Backward(const __half* dy, const __half* x, const __half* y, const __half* saved,
                        const FusedMlpParams<__half>& p, __half* dx, const DzBuffers<__half>& bufs,
                        bool any_wgrad, float* partials, const WsLayout& ws, const FusedMlpShape& s,
                        cudaStream_t stream) {
  if (!Aligned16(saved)) return cudaErrorMisalignedAddress;
  DeviceLimits d;
  MmaPlan pl;
  cudaError_t err = MmaPlanFor(s, x, y, dx, dy, &d, &pl);
  if (err != cudaSuccess) return err;
  err = DispatchWidth<MmaBackwardLaunch>(s.width, dy, y, saved, p, dx, bufs, s, pl, d, stream);
  if (err != cudaSuccess || !any_wgrad) return err;
  const int matrices = s.hidden_layers + 1;
  const int wsmem = WgradSmemBytesMma(pl, matrices);
  err = cudaFuncSetAttribute(MmaWgradKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wsmem);
  if (err != cudaSuccess) return err;
  const int64_t rows_per_split = (s.n + ws.splits - 1) / ws.splits;
  MmaWgradKernel<<<dim3(ws.splits, matrices), 32 * kWgWarps, wsmem, stream>>>(
      x, saved, bufs, partials, rows_per_split, ws.part_stride, s, pl);
  return cudaGetLastError();
}

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo
