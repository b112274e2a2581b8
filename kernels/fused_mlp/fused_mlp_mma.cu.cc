// FusedMLP fused on tensor cores (the launchers are fused_mlp.cu.cc): the
// forward, the backward and the weight-gradient kernel of the paths
// BackwardPathOf names kFusedWgrad and kWgradKernel; float16 by mma.sync
// m16n8k16, float32 by TF32 mma.sync m16n8k8 (HalfMma, Tf32Mma in
// fused_mlp_mma.h), both with float accumulation. The TF32 layer path's
// kernels are fused_mlp_layers_tf32.cu.cc. Activation formulas come from
// kernels/common/activations.h.
// A translation unit of its own: its many template instantiations (widths,
// element kinds, paths) are most of the op's nvcc time, built in parallel with
// the other units and rebuilt only when this file changes.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/activations.h"
#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/fused_mlp/fused_mlp_mma.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {
namespace {

// ---- tensor cores (mma.sync, float accumulation) -------------------------------
//
// Every warp owns kRows = 16 * kMt rows of the batch and carries them through
// all layers in registers: a layer's float accumulators (the mma C fragment)
// get bias and activation in place and are repacked as the next layer's A
// fragment (float16: C of n-tiles 2k, 2k+1 is exactly A of k-step k in the PTX
// fragment layouts; TF32: C of n-tile k is A of k-step k under the k order of
// Tf32Mma), so activations never leave the registers between layers. Every
// weight matrix (and bias) sits in shared memory, loaded once per block of a
// persistent grid; B fragments come from it (float16: ldmatrix, .trans for W,
// plain for W^T in the backward). Shared memory per warp: two row-staging
// buffers for coalesced 16-byte global loads/stores of x, y, the saved
// activations, dL/dz and dx. Input/output widths are runtime (k-steps and
// 16-column chunks looped); the hidden width is the template argument.

constexpr int kWgStages = 3;    // chunks in flight per block
constexpr int kWgWarps = 16;    // weight-gradient kernel

template <class Tr, int W>
struct MmaTile {
  static constexpr int kMt = Tr::MTiles(W);
  static constexpr int kRows = 16 * kMt;
  static constexpr int kNt = W / 8;       // n8 tiles of a hidden layer
  static constexpr int kKt = W / Tr::kK;  // k-steps of a hidden layer
  // The staging of a net no wider than W (MakeMmaPlan's stage_ld and
  // stage_bytes when its widest dimension is W).
  static constexpr int kStageLd = W + Tr::kSkew;
  static constexpr int kStageElems =
      static_cast<int>(Align128(sizeof(typename Tr::T) * kRows * kStageLd) / sizeof(typename Tr::T));
};

// Shared-memory plan of the forward/backward kernels, computed on the host.
struct MmaPlan {
  int kp[kFusedMlpMaxMatrices], np[kFusedMlpMaxMatrices];  // padded matrix dims
  int w_off[kFusedMlpMaxMatrices];  // elements; 0 for every matrix when streamed
  int b_off[kFusedMlpMaxMatrices];  // floats into the bias region
  int weight_bytes, bias_bytes;
  int stage_ld;     // elements per staging row
  int stage_bytes;  // one staging buffer of one warp
  int warps;
  int resident;     // every matrix in shared memory for the kernel's life
  int x_vec, y_vec, dx_vec, dy_vec;  // rows 16-byte aligned: cp.async / int4 paths
};

// Builds the plan; false when it cannot fit (never for the supported shapes).
template <class Tr>
bool MakeMmaPlan(const FusedMlpShape& s, int buffers, int smem_optin, bool biases, MmaPlan* pl) {
  using T = typename Tr::T;
  const Dims dm = DimsOf(s);
  const int matrices = s.hidden_layers + 1;
  int wbytes = 0, max_w = 0, bfloats = 0;
  for (int l = 0; l < matrices; ++l) {
    int k, kp, nn, np;
    MatrixDims(l, matrices, s.in_dim, dm.in_p, s.width, s.out_dim, dm.out_p, &k, &kp, &nn, &np);
    pl->kp[l] = kp;
    pl->np[l] = np;
    const int bytes = static_cast<int>(Align128(sizeof(T) * kp * (np + Tr::kSkew)));
    pl->w_off[l] = wbytes / static_cast<int>(sizeof(T));
    wbytes += bytes;
    max_w = std::max(max_w, bytes);
    pl->b_off[l] = bfloats;
    bfloats += np;
  }
  pl->bias_bytes = biases ? static_cast<int>(Align128(sizeof(float) * bfloats)) : 0;
  pl->stage_ld = dm.d + Tr::kSkew;
  pl->stage_bytes = static_cast<int>(Align128(sizeof(T) * 16 * Tr::MTiles(s.width) * pl->stage_ld));
  const int per_warp = buffers * pl->stage_bytes;
  const int max_warps = Tr::MaxWarps(s.width);
  // Resident when at least 8 warps fit beside all the weights; else one
  // matrix at a time (streamed, block-synchronous per layer).
  pl->resident = wbytes + pl->bias_bytes + std::min(8, max_warps) * per_warp <= smem_optin;
  pl->weight_bytes = pl->resident ? wbytes : max_w;
  if (!pl->resident) {
    for (int l = 0; l < matrices; ++l) pl->w_off[l] = 0;
  }
  const int avail = smem_optin - pl->weight_bytes - pl->bias_bytes;
  pl->warps = std::min(max_warps, avail / per_warp);
  return pl->warps >= 1;
}

int MmaSmemBytes(const MmaPlan& pl, int buffers) {
  return pl.weight_bytes + pl.bias_bytes + pl.warps * buffers * pl.stage_bytes;
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

// acc[MT][NT] += A * B over k-step kk; a(mt) is the A fragment of m-tile mt.
template <class Tr, int MT, int NT, bool TRANS, typename AFrag>
__device__ __forceinline__ void MmaKStep(float (&acc)[MT][NT][4], AFrag&& a, const typename Tr::T* w, int ldw,
                                         int kk, int lane) {
#pragma unroll
  for (int j = 0; j < NT / 2; ++j) {
    uint32_t b[4];
    Tr::template LoadB<TRANS>(b, w, ldw, kk, j, lane);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      Tr::Mma(acc[mt][2 * j], a(mt), b[0], b[1]);
      Tr::Mma(acc[mt][2 * j + 1], a(mt), b[2], b[3]);
    }
  }
}

// acc[MT][NT] += A (kRows x kK*ksteps, row-major in shared memory) * B.
template <class Tr, int MT, int NT, bool TRANS>
__device__ __forceinline__ void MmaSmemA(float (&acc)[MT][NT][4], const typename Tr::T* a, int lda,
                                         int ksteps, const typename Tr::T* w, int ldw, int lane) {
  for (int kk = 0; kk < ksteps; ++kk) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) Tr::LoadA(af[mt], a + mt * 16 * lda, lda, kk, lane);
    MmaKStep<Tr, MT, NT, TRANS>(acc, [&](int mt) -> const uint32_t(&)[4] { return af[mt]; }, w, ldw, kk, lane);
  }
}

// acc[MT][NT] += A (register fragments, KT k-steps) * B.
template <class Tr, int MT, int KT, int NT, bool TRANS>
__device__ __forceinline__ void MmaRegA(float (&acc)[MT][NT][4], const uint32_t (&af)[MT][KT][4],
                                        const typename Tr::T* w, int ldw, int lane) {
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    MmaKStep<Tr, MT, NT, TRANS>(acc, [&](int mt) -> const uint32_t(&)[4] { return af[mt][kk]; }, w, ldw, kk,
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

// f(mt, kk) for each m-tile and k-step of a fragment array [MT][KT], unrolled:
// every index a constant, so the fragments stay in registers.
template <int MT, int KT, typename F>
__device__ __forceinline__ void ForEachFrag(F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) f(mt, kk);
  }
}

// af = act(acc) in the element kind: C of k-step kk's n-tiles -> A of k-step kk.
template <class Tr, int MT, int KT>
__device__ __forceinline__ void ActPack(uint32_t (&af)[MT][KT][4], const float (&acc)[MT][Tr::kCTiles * KT][4],
                                        int act, float alpha) {
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
    ForEachFrag<MT, KT>([&](int mt, int kk) {
      Tr::MakeA(af[mt][kk], [&](int q, int r) { return ActF<A>(acc[mt][Tr::kCTiles * kk + q][r], act, alpha); });
    });
  });
}

// The layer input h (kRows x kK*KT in shared memory) at the C positions, as
// stored: read before its buffer takes the next layer's input.
template <class Tr, int MT, int KT>
__device__ __forceinline__ void LoadCFrags(uint32_t (&hf)[MT][KT][4], const typename Tr::T* hs, int ld, int lane) {
  ForEachFrag<MT, KT>([&](int mt, int kk) { Tr::LoadC(hf[mt][kk], hs + mt * 16 * ld, ld, kk, lane); });
}

// dz = acc * act'(h) in the element kind; hk(mt, kk, h) gives h, the layer
// input at the C positions of m-tile mt, k-step kk, as stored (Tr::LoadC).
template <class Tr, int MT, int KT, typename HK>
__device__ __forceinline__ void DerivPack(uint32_t (&dz)[MT][KT][4], const float (&acc)[MT][Tr::kCTiles * KT][4],
                                          HK&& hk, int act, float alpha) {
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
    ForEachFrag<MT, KT>([&](int mt, int kk) {
      uint32_t hr[4];
      hk(mt, kk, hr);
      float h[Tr::kCTiles][4];
      Tr::CValues(h, hr);
      Tr::MakeA(dz[mt][kk],
                [&](int q, int r) { return acc[mt][Tr::kCTiles * kk + q][r] * ActD<A>(h[q][r], act, alpha); });
    });
  });
}

// A fragments -> staging rows (kRows x kK*KT).
template <class Tr, int MT, int KT>
__device__ __forceinline__ void StoreFrags(typename Tr::T* st, int ld, const uint32_t (&af)[MT][KT][4], int lane) {
  ForEachFrag<MT, KT>([&](int mt, int kk) { Tr::StoreA(st + mt * 16 * ld, ld, af[mt][kk], kk, lane); });
}

// 16 output columns (two n-tiles) -> staging columns col0.., with activation.
template <class Tr, int MT>
__device__ __forceinline__ void StoreChunk(typename Tr::T* st, int ld, int col0, const float (&o)[MT][2][4],
                                           int act, float alpha, int lane) {
  const int g = lane >> 2, t = lane & 3;
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        typename Tr::T* p = st + (mt * 16 + g) * ld + col0 + 8 * h + 2 * t;
        Tr::StorePair(p, ActF<A>(o[mt][h][0], act, alpha), ActF<A>(o[mt][h][1], act, alpha));
        Tr::StorePair(p + 8 * ld, ActF<A>(o[mt][h][2], act, alpha), ActF<A>(o[mt][h][3], act, alpha));
      }
    }
  });
}

// Rows a warp staged (cp.async, raw from memory) made operands of the fused
// weight gradient: TF32 rounds them once here, in place, for every warp that
// reads them; float16 needs nothing. The caller syncs the warp before and after.
template <class Tr>
__device__ __forceinline__ void StagedRoundRows(typename Tr::T* st, int ld, int rows, int cols, int lane) {
  if constexpr (Tr::kStagedRounds) {
    for (int e = lane; e < rows * cols; e += 32) {
      const int r = e / cols, c = e - r * cols;
      st[r * ld + c] = Tr::Operand(st[r * ld + c]);
    }
  }
}

// Staging -> rows [row0, min(n, row0 + rows)) of a row-major [n, cols] matrix.
template <typename T>
__device__ __forceinline__ void WarpStoreRows(T* g, const T* st, int ld, int64_t row0, int rows, int64_t n,
                                              int cols, bool vec, int lane) {
  constexpr int kV = 16 / sizeof(T);
  const int valid = static_cast<int>(std::min<int64_t>(rows, n - row0));
  if (valid <= 0) return;
  if (vec) {
    const int per_row = cols / kV;
    for (int e = lane; e < valid * per_row; e += 32) {
      const int r = e / per_row, c = (e - r * per_row) * kV;
      *reinterpret_cast<int4*>(g + (row0 + r) * cols + c) = *reinterpret_cast<const int4*>(st + r * ld + c);
    }
  } else {
    for (int e = lane; e < valid * cols; e += 32) {
      const int r = e / cols, c = e - r * cols;
      g[(row0 + r) * cols + c] = st[r * ld + c];
    }
  }
}

// Matrix l into shared memory in the TRANS layout of Tr, zero-padded (all threads).
template <class Tr, bool TRANS>
__device__ __forceinline__ void LoadMatrix(typename Tr::T* w, const typename Tr::T* __restrict__ g, int k, int kp,
                                           int nn, int np) {
  const int ld = Tr::Ld(np, TRANS);
  for (int e = threadIdx.x; e < kp * np; e += blockDim.x) {
    const int r = e / np, c = e - r * np;
    w[Tr::WIdx(r, c, ld, TRANS)] = (r < k && c < nn) ? Tr::Operand(g[r * nn + c]) : FromF<typename Tr::T>(0.0f);
  }
}

template <class Tr, bool TRANS>
__device__ __forceinline__ void LoadAllMatrices(typename Tr::T* wsm, const FusedMlpParams<typename Tr::T>& p,
                                                const FusedMlpShape& s, const MmaPlan& pl) {
  const int matrices = s.hidden_layers + 1;
  for (int l = 0; l < matrices; ++l) {
    const int k = l == 0 ? s.in_dim : s.width, nn = l == matrices - 1 ? s.out_dim : s.width;
    LoadMatrix<Tr, TRANS>(wsm + pl.w_off[l], p.w[l], k, pl.kp[l], nn, pl.np[l]);
  }
}

// Weight l for this layer: resident, or loaded here by the whole block.
template <class Tr, bool TRANS>
__device__ __forceinline__ const typename Tr::T* LayerWeights(typename Tr::T* wsm,
                                                              const FusedMlpParams<typename Tr::T>& p,
                                                              const FusedMlpShape& s, const MmaPlan& pl, int l) {
  if (!pl.resident) {
    const int matrices = s.hidden_layers + 1;
    const int k = l == 0 ? s.in_dim : s.width, nn = l == matrices - 1 ? s.out_dim : s.width;
    __syncthreads();
    LoadMatrix<Tr, TRANS>(wsm, p.w[l], k, pl.kp[l], nn, pl.np[l]);
    __syncthreads();
  }
  return wsm + pl.w_off[l];
}

template <class Tr, int W>
__global__ void __launch_bounds__(32 * Tr::MaxWarps(W))
    MmaForwardKernel(const typename Tr::T* __restrict__ x, FusedMlpParams<typename Tr::T> p,
                     typename Tr::T* __restrict__ y, typename Tr::T* __restrict__ saved, FusedMlpShape s,
                     MmaPlan pl) {
  using T = typename Tr::T;
  using Tl = MmaTile<Tr, W>;
  constexpr int MT = Tl::kMt, R = Tl::kRows, NT = Tl::kNt, KT = Tl::kKt;
  extern __shared__ __align__(128) char smem_raw[];
  T* wsm = reinterpret_cast<T*>(smem_raw);
  float* bsm = reinterpret_cast<float*>(smem_raw + pl.weight_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* xs = reinterpret_cast<T*>(smem_raw + pl.weight_bytes + pl.bias_bytes + 2 * warp * pl.stage_bytes);
  T* st = xs + pl.stage_bytes / static_cast<int>(sizeof(T));
  const int ld = pl.stage_ld;
  const int L = s.hidden_layers;
  for (int l = 0; l <= L; ++l) {
    for (int c = threadIdx.x; c < pl.np[l]; c += blockDim.x) {
      const int nn = l == L ? s.out_dim : s.width;
      bsm[pl.b_off[l] + c] = c < nn ? ToF(p.b[l][c]) : 0.0f;
    }
  }
  if (pl.resident) LoadAllMatrices<Tr, true>(wsm, p, s, pl);
  __syncthreads();

  const int64_t rows_per_block = static_cast<int64_t>(pl.warps) * R;
  const int64_t blocks = (s.n + rows_per_block - 1) / rows_per_block;
  int64_t blk = blockIdx.x;
  if (blk < blocks) {
    LoadRows(xs, ld, x, blk * rows_per_block + warp * R, R, s.n, s.in_dim, pl.kp[0], pl.x_vec, lane);
    CpAsyncCommit();
  }
  for (; blk < blocks; blk += gridDim.x) {
    const int64_t row0 = blk * rows_per_block + warp * R;
    CpAsyncWait<0>();
    __syncwarp();
    float acc[MT][NT][4];
    uint32_t af[MT][KT][4];
    {
      const T* w = LayerWeights<Tr, true>(wsm, p, s, pl, 0);
      InitAcc(acc, bsm + pl.b_off[0], lane);
      MmaSmemA<Tr, MT, NT, true>(acc, xs, ld, pl.kp[0] / Tr::kK, w, Tr::Ld(pl.np[0], true), lane);
    }
    __syncwarp();
    // x of this warp's next tile streams in while the layers run.
    const int64_t next = blk + gridDim.x;
    if (next < blocks) {
      LoadRows(xs, ld, x, next * rows_per_block + warp * R, R, s.n, s.in_dim, pl.kp[0], pl.x_vec,
               lane);
    }
    CpAsyncCommit();
    ActPack<Tr>(af, acc, s.activation, s.alpha);
    for (int l = 0;; ++l) {
      if (saved != nullptr) {
        __syncwarp();
        StoreFrags<Tr>(st, ld, af, lane);
        __syncwarp();
        WarpStoreRows(saved + static_cast<int64_t>(l) * s.n * W, st, ld, row0, R, s.n, W, true, lane);
      }
      if (l + 1 == L) break;
      const T* w = LayerWeights<Tr, true>(wsm, p, s, pl, l + 1);
      InitAcc(acc, bsm + pl.b_off[l + 1], lane);
      MmaRegA<Tr, MT, KT, NT, true>(acc, af, w, Tr::Ld(W, true), lane);
      ActPack<Tr>(af, acc, s.activation, s.alpha);
    }
    const T* w = LayerWeights<Tr, true>(wsm, p, s, pl, L);
    const int ldw = Tr::Ld(pl.np[L], true);
    __syncwarp();
    for (int c = 0; c < pl.np[L]; c += 16) {
      float o[MT][2][4];
      InitAcc(o, bsm + pl.b_off[L] + c, lane);
      MmaRegA<Tr, MT, KT, 2, true>(o, af, w + Tr::ColOff(c, true), ldw, lane);
      StoreChunk<Tr>(st, ld, c, o, s.output_activation, s.alpha, lane);
    }
    __syncwarp();
    WarpStoreRows(y, st, ld, row0, R, s.n, s.out_dim, pl.y_vec, lane);
  }
  CpAsyncWait<0>();
}

// One k-step (Tr::kK rows) of a 16 MQ x 16 NQ weight-gradient tile: acc +=
// X^T dz for columns m0.. of X (staged [k][m] at sa) and n0.. of dz (staged
// [k][n] at sb), and dbacc[q] += 1^T dz (row 0 of an all-ones A times dz) for
// the n8 tiles q in db_mask. Each A fragment serves NQ pairs of n8 tiles, each
// B fragment MQ m16 tiles. One 16 x 16 tile (MQ = NQ = 1) takes both n8
// tiles' sums or none (db_mask 3 or 0); with Tr::kDbBySum, lane (g, t)'s
// share of column g of n8 tile q in dbacc[q][0] (WgradDbLane). kRound: the
// staged operands are raw float32 (TF32 rounds them per load); otherwise they
// are the element type's values already.
template <class Tr, int MQ, int NQ, bool kRound>
__device__ __forceinline__ void WgradKStep(float (&acc)[MQ][2 * NQ][4], float (&dbacc)[2 * NQ][4],
                                           unsigned db_mask, const typename Tr::T* sa, int lda,
                                           const typename Tr::T* sb, int ldb, int m0, int n0, int kk, int lane) {
  const uint32_t ones[4] = {Tr::kOnes, Tr::kOnes, Tr::kOnes, Tr::kOnes};
  uint32_t af[MQ][4];
#pragma unroll
  for (int mq = 0; mq < MQ; ++mq) Tr::template WgradA<kRound>(af[mq], sa, lda, m0 + 16 * mq, kk, lane);
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    uint32_t b[4];
    Tr::template WgradB<kRound>(b, sb, ldb, n0 + 16 * q, kk, lane);
#pragma unroll
    for (int mq = 0; mq < MQ; ++mq) {
      Tr::Mma(acc[mq][2 * q], af[mq], b[0], b[1]);
      Tr::Mma(acc[mq][2 * q + 1], af[mq], b[2], b[3]);
    }
    if constexpr (MQ * NQ > 1) {
      if (db_mask & (1u << (2 * q))) Tr::Mma(dbacc[2 * q], ones, b[0], b[1]);
      if (db_mask & (2u << (2 * q))) Tr::Mma(dbacc[2 * q + 1], ones, b[2], b[3]);
    } else if constexpr (Tr::kDbBySum) {
      if (db_mask != 0u) {
        dbacc[0][0] += Tr::ColSum(b[0], b[1]);
        dbacc[1][0] += Tr::ColSum(b[2], b[3]);
      }
    } else if (db_mask != 0u) {  // all or none: one branch (each one around mma.sync costs a warp sync)
      Tr::Mma(dbacc[0], ones, b[0], b[1]);
      Tr::Mma(dbacc[1], ones, b[2], b[3]);
    }
  }
}

// Column g of an n8 tile, from the lanes' shares (Tr::kDbBySum), summed over
// t in a fixed order; every lane calls it, lane (g, 0) stores the result.
__device__ __forceinline__ float WgradDbLane(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The block's share of dW_l += X_l^T dz_l and db_l += 1^T dz_l over the rows
// that its first `staged` warps have staged (X_l in each warp's second
// staging buffer, dz_l in its first), added to the block's partial `part` ([kp][np] then db;
// stored when `first`, added to in L2 after, kept there until `last`): warp w
// owns the 16 MQ x 16 NQ tiles w, w + warps, ..., summed over the warps' rows
// in a fixed order, so the partials, and the dW and db summed from them, are
// bitwise deterministic. The staged X_l and dz_l are operand values already
// (on TF32: saved activations and hidden dz as the products rounded them, x
// and the output's dz rounded where staged). Column sums: 16 x 16 tiles in
// tile row 0 form those of their columns (on TF32 by fp32 adds of B,
// Tr::kDbBySum, else by an all-ones mma); wider tiles spread them over a tile
// column (n8 tile q by its (q mod tm)-th tile), as the first row's warps
// would otherwise do half again the mma of the others. kp % (16 MQ) == 0,
// np % (16 NQ) == 0. kLd > 0: ld == kLd and stage_elems == kStageElems, so
// that every shared-memory offset is an immediate.
template <class Tr, int R, int MQ, int NQ, int kLd = 0, int kStageElems = 0>
__device__ __forceinline__ void BlockWgrad(float* __restrict__ part, const typename Tr::T* stage0, int stage_elems_rt,
                                           int ld_rt, int kp, int np, bool first, bool last, int warps, int staged,
                                           int warp, int lane) {
  using T = typename Tr::T;
  const int ld = kLd > 0 ? kLd : ld_rt;
  const int stage_elems = kLd > 0 ? kStageElems : stage_elems_rt;
  const int tm = kp / (16 * MQ), tn = np / (16 * NQ), tiles = tm * tn;
  const int g = lane >> 2, tq = lane & 3;
  const uint64_t keep = L2Policy(last ? kL2Normal : kL2Keep);
  auto put = [&](float* p, auto v) {
    if (first) {
      StoreHinted(p, v, keep);
    } else {
      AddHinted(p, v, keep);
    }
  };
  for (int t = warp; t < tiles; t += warps) {
    const int tr = t / tn, m0 = tr * 16 * MQ, n0 = (t % tn) * 16 * NQ;
    unsigned db_mask = 0;
#pragma unroll
    for (int q = 0; q < 2 * NQ; ++q) db_mask |= (MQ * NQ > 1 ? q % tm == tr : tr == 0) ? 1u << q : 0u;
    float acc[MQ][2 * NQ][4] = {};
    float dbacc[2 * NQ][4] = {};
    for (int v = 0; v < staged; ++v) {
      const T* ds = stage0 + 2 * v * stage_elems;
      const T* hs = ds + stage_elems;
#pragma unroll
      for (int kk = 0; kk < R / Tr::kK; ++kk) {
        WgradKStep<Tr, MQ, NQ, false>(acc, dbacc, db_mask, hs, ld, ds, ld, m0, n0, kk, lane);
      }
    }
#pragma unroll
    for (int q = 0; q < 2 * NQ; ++q) {
      const int c = n0 + 8 * q + 2 * tq;
#pragma unroll
      for (int mq = 0; mq < MQ; ++mq) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          put(part + (m0 + 16 * mq + Tr::WgradRow(g, h)) * np + c,
              make_float2(acc[mq][q][2 * h], acc[mq][q][2 * h + 1]));
        }
      }
      if constexpr (MQ * NQ == 1 && Tr::kDbBySum) {
        const float v = WgradDbLane(dbacc[q][0]);
        if ((db_mask >> q & 1u) && tq == 0) put(part + kp * np + n0 + 8 * q + g, v);
      } else if ((db_mask >> q & 1u) && g == 0) {  // row 0 of 1^T dz
        put(part + kp * np + c, make_float2(dbacc[q][0], dbacc[q][1]));
      }
    }
  }
}

// kFuseWgrad: the weight and bias gradients are formed here, block by block
// (BlockWgrad after each matrix, between block barriers), into per-block
// partials (`partials`, one per block of the grid and matrix); dL/dz never
// leaves the chip. Otherwise dL/dz goes to `bufs` for MmaWgradKernel.
template <class Tr, int W, bool kFuseWgrad>
__global__ void __launch_bounds__(32 * Tr::MaxWarps(W))
    MmaBackwardKernel(const typename Tr::T* __restrict__ dy, const typename Tr::T* __restrict__ y,
                      const typename Tr::T* __restrict__ saved, const typename Tr::T* __restrict__ x,
                      FusedMlpParams<typename Tr::T> p, typename Tr::T* __restrict__ dx,
                      DzBuffers<typename Tr::T> bufs, float* __restrict__ partials, int64_t part_stride,
                      FusedMlpShape s, MmaPlan pl) {
  using T = typename Tr::T;
  using Tl = MmaTile<Tr, W>;
  constexpr int MT = Tl::kMt, R = Tl::kRows, NT = Tl::kNt, KT = Tl::kKt;
  // Wider weight-gradient tiles at width 128 (32 x 32 where a matrix has one
  // per warp, else 16 x 32): each fragment serves two mma, so fewer
  // shared-memory loads per mma.
  constexpr bool kWideWgrad = W >= 128;
  // Wide tiles need the registers that dz would hold across the weight-
  // gradient step: at width 128 dz goes through shared memory instead.
  constexpr bool kStagedDz = kWideWgrad;
  extern __shared__ __align__(128) char smem_raw[];
  T* wsm = reinterpret_cast<T*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* const stage0 = reinterpret_cast<T*>(smem_raw + pl.weight_bytes + pl.bias_bytes);
  const int stage_elems = pl.stage_bytes / static_cast<int>(sizeof(T));
  T* ds = stage0 + 2 * warp * stage_elems;
  T* hs = ds + stage_elems;
  const int ld = pl.stage_ld;
  const int L = s.hidden_layers, out_p = pl.np[L];
  if (pl.resident) LoadAllMatrices<Tr, false>(wsm, p, s, pl);
  __syncthreads();

  // Read once: the saved activations and x leave L2 before the partials.
  const uint64_t stream = L2Policy(kL2Stream);
  const uint64_t* const load_policy = kFuseWgrad ? &stream : nullptr;
  // Matrix l's weight gradient from every warp's staged X_l and dz_l.
  auto block_wgrad = [&](int l, bool first, bool last, int staged) {
    if constexpr (kFuseWgrad) {
      __syncthreads();
      float* part = partials + (static_cast<int64_t>(l) * gridDim.x + blockIdx.x) * part_stride;
      const int kp = pl.kp[l], np = pl.np[l];
      if (kWideWgrad && kp % 32 == 0 && np % 32 == 0 && (kp / 32) * (np / 32) >= pl.warps) {
        BlockWgrad<Tr, R, 2, 2>(part, stage0, stage_elems, ld, kp, np, first, last, pl.warps, staged, warp, lane);
      } else if (kWideWgrad && np % 32 == 0) {
        BlockWgrad<Tr, R, 1, 2>(part, stage0, stage_elems, ld, kp, np, first, last, pl.warps, staged, warp, lane);
      } else if (Tr::FixedWgradStrides(W) && ld == Tl::kStageLd && stage_elems == Tl::kStageElems) {
        BlockWgrad<Tr, R, 1, 1, Tl::kStageLd, Tl::kStageElems>(part, stage0, stage_elems, ld, kp, np, first, last,
                                                               pl.warps, staged, warp, lane);
      } else {
        BlockWgrad<Tr, R, 1, 1>(part, stage0, stage_elems, ld, kp, np, first, last, pl.warps, staged, warp, lane);
      }
      __syncthreads();
    }
  };
  // Each block takes a contiguous share of the R-row warp tiles (shares differ
  // by at most one tile), one tile per warp a round: a block's last round is
  // as short as its remainder (BlockWgrad reads only the staged warps' rows),
  // not a whole round that the other blocks wait for.
  const int64_t tiles = (s.n + R - 1) / R;
  const int64_t t_begin = tiles * blockIdx.x / gridDim.x, t_end = tiles * (blockIdx.x + 1) / gridDim.x;
  for (int64_t t0 = t_begin; t0 < t_end; t0 += pl.warps) {
    const int staged = static_cast<int>(std::min<int64_t>(pl.warps, t_end - t0));
    // A warp past the block's share has no rows (n_rows 0: loads give zeros,
    // nothing is stored). With every weight resident (always so when the
    // weight gradients are fused) it only meets the block barriers; with
    // weights streamed it runs every layer, whose weight loads are block-wide.
    const bool has_rows = warp < staged;
    const bool active = has_rows || (!kFuseWgrad && !pl.resident);
    const int64_t n_rows = kFuseWgrad || has_rows ? s.n : 0;
    const int64_t row0 = (t0 + warp) * R;
    const bool first = t0 == t_begin, last = t0 + pl.warps >= t_end;
    float acc[MT][NT][4];
    if (active) {
      // h_L (the last hidden output) streams in while dL/dz of the output is formed.
      LoadRows(hs, ld, saved + static_cast<int64_t>(L - 1) * s.n * W, row0, R, n_rows, W, W, true, lane,
               load_policy);
      CpAsyncCommit();
      __syncwarp();
      if (pl.dy_vec) {  // out_dim == out_p here: 16 bytes per load
        DispatchAct(s.output_activation, [&](auto a) {
          constexpr int A = decltype(a)::value;
          constexpr int kV = 16 / sizeof(T);
          const int per_row = out_p / kV;
          for (int e = lane; e < R * per_row; e += 32) {
            const int r = e / per_row, c = (e - r * per_row) * kV;
            const int64_t row = row0 + r;
            int4 out = make_int4(0, 0, 0, 0);
            if (row < n_rows) {
              const int4 gv = *reinterpret_cast<const int4*>(dy + row * out_p + c);
              if constexpr (A == kActNone) {
                out = gv;  // the derivative is 1: y is not read
              } else {
                const int4 yv = *reinterpret_cast<const int4*>(y + row * out_p + c);
                const T* gs = reinterpret_cast<const T*>(&gv);
                const T* ys = reinterpret_cast<const T*>(&yv);
                T* os = reinterpret_cast<T*>(&out);
#pragma unroll
                for (int q = 0; q < kV; ++q) os[q] = FromF<T>(ToF(gs[q]) * ActD<A>(ToF(ys[q]), 0, s.alpha));
              }
              if constexpr (Tr::kStagedRounds) {
                T* ev = reinterpret_cast<T*>(&out);
#pragma unroll
                for (int q = 0; q < kV; ++q) ev[q] = Tr::Operand(ev[q]);
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
          if (row < n_rows && c < s.out_dim) {
            const int64_t i = row * s.out_dim + c;
            v = ToF(dy[i]);
            if (s.output_activation != kActNone) {  // else the derivative is 1: y is not read
              v *= activation_derivative_from_output(ToF(y[i]), s.output_activation, s.alpha);
            }
          }
          ds[r * ld + c] = Tr::Operand(FromF<T>(v));
        }
      }
      __syncwarp();
      if (!kFuseWgrad && bufs.dz[L] != nullptr) WarpStoreRows(bufs.dz[L], ds, ld, row0, R, n_rows, out_p, true, lane);
    }
    // X_l, the input of matrix l, into the second buffer (x only when fused).
    auto load_input = [&](int l) {
      if (l >= 1) {
        LoadRows(hs, ld, saved + static_cast<int64_t>(l - 1) * s.n * W, row0, R, n_rows, W, W, true, lane,
                 load_policy);
      } else if constexpr (kFuseWgrad) {
        LoadRows(hs, ld, x, row0, R, n_rows, s.in_dim, pl.kp[0], pl.x_vec, lane, load_policy);
      }
      CpAsyncCommit();
    };
    auto h_smem = [&](int mt, int kk, uint32_t (&h)[4]) { Tr::LoadC(h, hs + mt * 16 * ld, ld, kk, lane); };
    // dz_0 in registers (x streaming in, when fused): dx through the first
    // buffer, then dz_0 into it.
    auto finish = [&](const uint32_t (&dz)[MT][KT][4]) {
      if (!kFuseWgrad && bufs.dz[0] != nullptr) {
        StoreFrags<Tr>(ds, ld, dz, lane);
        __syncwarp();
        WarpStoreRows(bufs.dz[0], ds, ld, row0, R, n_rows, W, true, lane);
        __syncwarp();
      }
      if (dx != nullptr) {
        const T* w = LayerWeights<Tr, false>(wsm, p, s, pl, 0);
        const int ldw = Tr::Ld(W, false);
        for (int c = 0; c < pl.kp[0]; c += 16) {
          float o[MT][2][4];
          InitAcc(o, static_cast<const float*>(nullptr), lane);
          MmaRegA<Tr, MT, KT, 2, false>(o, dz, w + c * ldw, ldw, lane);
          StoreChunk<Tr>(ds, ld, c, o, kActNone, 0.0f, lane);
        }
        __syncwarp();
        WarpStoreRows(dx, ds, ld, row0, R, n_rows, s.in_dim, pl.dx_vec, lane);
        __syncwarp();
      }
      if constexpr (kFuseWgrad) StoreFrags<Tr>(ds, ld, dz, lane);
    };
    if constexpr (kStagedDz) {
      // Matrix l: dz_l (first buffer) and its input X_l (second) are staged
      // and its weight gradient formed; then dz_{l-1} = (dz_l W_l^T) *
      // act'(X_l) goes to registers while X_{l-1} streams into the second
      // buffer. Only the staging lives across the weight-gradient step.
      if (active) {
        CpAsyncWait<0>();
        __syncwarp();
      }
      block_wgrad(L, first, last, staged);
      for (int l = L; l >= 1; --l) {
        if (active) {
          uint32_t hf[MT][KT][4];
          LoadCFrags<Tr>(hf, hs, ld, lane);
          __syncwarp();
          load_input(l - 1);
          {
            const T* w = LayerWeights<Tr, false>(wsm, p, s, pl, l);
            InitAcc(acc, static_cast<const float*>(nullptr), lane);
            MmaSmemA<Tr, MT, NT, false>(acc, ds, ld, pl.np[l] / Tr::kK, w, Tr::Ld(pl.np[l], false), lane);
          }
          uint32_t dz[MT][KT][4];
          DerivPack<Tr>(dz, acc, [&](int mt, int kk, uint32_t (&h)[4]) {
            for (int r = 0; r < 4; ++r) h[r] = hf[mt][kk][r];
          }, s.activation, s.alpha);  // dz of matrix l - 1
          __syncwarp();
          if (l >= 2) {
            StoreFrags<Tr>(ds, ld, dz, lane);
            __syncwarp();
            if (!kFuseWgrad && bufs.dz[l - 1] != nullptr) {
              WarpStoreRows(bufs.dz[l - 1], ds, ld, row0, R, n_rows, W, true, lane);
            }
          } else {
            finish(dz);
          }
          CpAsyncWait<0>();
          __syncwarp();
          if constexpr (kFuseWgrad && Tr::kStagedRounds) {
            if (l == 1) {  // x, raw from memory
              StagedRoundRows<Tr>(hs, ld, R, pl.kp[0], lane);
              __syncwarp();
            }
          }
        }
        block_wgrad(l - 1, first, last, staged);
      }
    } else {
      // dz_{l-1} is formed before matrix l's weight gradient and stays in
      // registers across it; X_{l-1} streams in during the next product.
      uint32_t dz[MT][KT][4];
      if (active) {
        {
          const T* w = LayerWeights<Tr, false>(wsm, p, s, pl, L);
          InitAcc(acc, static_cast<const float*>(nullptr), lane);
          MmaSmemA<Tr, MT, NT, false>(acc, ds, ld, out_p / Tr::kK, w, Tr::Ld(out_p, false), lane);
        }
        CpAsyncWait<0>();
        __syncwarp();
        DerivPack<Tr>(dz, acc, h_smem, s.activation, s.alpha);  // dz of matrix L - 1
      }
      block_wgrad(L, first, last, staged);
      for (int l = L - 1; l >= 1; --l) {
        if (active) {
          __syncwarp();
          load_input(l);
          if (kFuseWgrad || bufs.dz[l] != nullptr) {  // staged for the weight gradient, or for memory
            StoreFrags<Tr>(ds, ld, dz, lane);
            __syncwarp();
            if (!kFuseWgrad) WarpStoreRows(bufs.dz[l], ds, ld, row0, R, n_rows, W, true, lane);
          }
          const T* w = LayerWeights<Tr, false>(wsm, p, s, pl, l);
          InitAcc(acc, static_cast<const float*>(nullptr), lane);
          MmaRegA<Tr, MT, KT, NT, false>(acc, dz, w, Tr::Ld(W, false), lane);
          CpAsyncWait<0>();
          __syncwarp();
          DerivPack<Tr>(dz, acc, h_smem, s.activation, s.alpha);  // dz of matrix l - 1
        }
        block_wgrad(l, first, last, staged);
      }
      if (active) {
        __syncwarp();
        load_input(0);
        finish(dz);
        CpAsyncWait<0>();
        __syncwarp();
        if constexpr (kFuseWgrad && Tr::kStagedRounds) {  // x, raw from memory
          StagedRoundRows<Tr>(hs, ld, R, pl.kp[0], lane);
          __syncwarp();
        }
      }
      block_wgrad(0, first, last, staged);
    }
  }
}

// Weight-gradient partials on tensor cores, when the backward cannot form
// them (its weights streamed, not resident): block (split, l) accumulates
// X_l^T dz_l over its rows in registers (16x16 output tiles spread over the
// warps), rows staged through a kWgStages-deep cp.async pipeline; db comes
// from the same mma with an all-ones A (column sums, fixed order). Partials
// are reduced over splits by FusedMlpWgradReduceKernel.
template <class Tr>
__global__ void __launch_bounds__(32 * kWgWarps, 2)
    MmaWgradKernel(const typename Tr::T* __restrict__ x, const typename Tr::T* __restrict__ saved,
                   DzBuffers<typename Tr::T> bufs, float* __restrict__ partials, int64_t rows_per_split,
                   int64_t part_stride, FusedMlpShape s, MmaPlan pl) {
  using T = typename Tr::T;
  constexpr int kMaxTiles = 64 / kWgWarps;  // (128/16)^2 tiles at most
  constexpr int kWgChunk = Tr::kWgChunk;
  extern __shared__ __align__(128) char smem_raw[];
  const int l = blockIdx.y;
  const int kp = pl.kp[l], np = pl.np[l];
  const int k = l == 0 ? s.in_dim : s.width;
  const int lda = kp + Tr::kSkew, ldb = np + Tr::kSkew;
  const int stage_elems = kWgChunk * (lda + ldb);
  T* const stage0 = reinterpret_cast<T*>(smem_raw);
  const T* a = l == 0 ? x : saved + static_cast<int64_t>(l - 1) * s.n * s.width;
  const bool a_vec = l == 0 ? pl.x_vec : true;
  const T* dz = bufs.dz[l];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * rows_per_split;
  const int64_t end = std::min<int64_t>(s.n, begin + rows_per_split);
  const int tn = np / 16, tiles = (kp / 16) * tn;

  auto issue = [&](int64_t r0, T* sa) {
    LoadRows(sa, lda, a, r0, kWgChunk, end, k, kp, a_vec, threadIdx.x, nullptr, blockDim.x);
    LoadRows(sa + kWgChunk * lda, ldb, dz, r0, kWgChunk, end, np, np, true, threadIdx.x, nullptr, blockDim.x);
  };

  // f(i, m0, n0) for each 16 x 16 output tile i of this warp (tile warp + i *
  // kWgWarps, at row m0 and column n0), unrolled: acc[i] stays in registers.
  auto for_each_tile = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < kMaxTiles; ++i) {
      const int t = warp + i * kWgWarps;
      if (t < tiles) f(i, (t / tn) * 16, (t % tn) * 16);
    }
  };

  float acc[kMaxTiles][1][2][4];  // one 16 x 16 tile (MQ = NQ = 1) each
#pragma unroll
  for (int i = 0; i < kMaxTiles; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      acc[i][0][h][0] = acc[i][0][h][1] = acc[i][0][h][2] = acc[i][0][h][3] = 0.0f;
    }
  }
  float dbacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  const bool db_warp = warp < tn;  // its tile 0 is (m0 = 0, n0 = 16 * warp)
  const int chunks = begin < end ? static_cast<int>((end - begin + kWgChunk - 1) / kWgChunk) : 0;
  // Every iteration commits one group (possibly empty), so wait_group
  // kWgStages - 1 means: chunk ch has landed.
#pragma unroll
  for (int st = 0; st < kWgStages - 1; ++st) {
    if (st < chunks) issue(begin + static_cast<int64_t>(st) * kWgChunk, stage0 + st * stage_elems);
    CpAsyncCommit();
  }
  for (int ch = 0; ch < chunks; ++ch) {
    const int ahead = ch + kWgStages - 1;
    if (ahead < chunks) {
      issue(begin + static_cast<int64_t>(ahead) * kWgChunk, stage0 + (ahead % kWgStages) * stage_elems);
    }
    CpAsyncCommit();
    CpAsyncWait<kWgStages - 1>();
    __syncthreads();
    const T* sa = stage0 + (ch % kWgStages) * stage_elems;
    const T* sb = sa + kWgChunk * lda;
    for_each_tile([&](int i, int m0, int n0) {
#pragma unroll
      for (int kk = 0; kk < kWgChunk / Tr::kK; ++kk) {
        WgradKStep<Tr, 1, 1, true>(acc[i], dbacc, i == 0 && db_warp ? 3u : 0u, sa, lda, sb, ldb, m0, n0, kk, lane);
      }
    });
    __syncthreads();
  }
  CpAsyncWait<0>();
  float* part = partials + (static_cast<int64_t>(l) * gridDim.x + blockIdx.x) * part_stride;
  const int g = lane >> 2, tq = lane & 3;
  for_each_tile([&](int i, int m0, int n0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = n0 + 8 * h + 2 * tq;
      part[(m0 + Tr::WgradRow(g, 0)) * np + c] = acc[i][0][h][0];
      part[(m0 + Tr::WgradRow(g, 0)) * np + c + 1] = acc[i][0][h][1];
      part[(m0 + Tr::WgradRow(g, 1)) * np + c] = acc[i][0][h][2];
      part[(m0 + Tr::WgradRow(g, 1)) * np + c + 1] = acc[i][0][h][3];
    }
  });
  if constexpr (Tr::kDbBySum) {
    if (db_warp) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float v = WgradDbLane(dbacc[h][0]);
        if (tq == 0) part[kp * np + warp * 16 + 8 * h + g] = v;
      }
    }
  } else if (db_warp && g == 0) {  // row 0 of the all-ones product: the column sums
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = warp * 16 + 8 * h + 2 * tq;
      part[kp * np + c] = dbacc[h][0];
      part[kp * np + c + 1] = dbacc[h][1];
    }
  }
}

template <class Tr>
int WgradSmemBytesMma(const MmaPlan& pl, int matrices) {
  int most = 0;
  for (int l = 0; l < matrices; ++l) {
    most = std::max(most, kWgStages * Tr::kWgChunk * (pl.kp[l] + pl.np[l] + 2 * Tr::kSkew) *
                              static_cast<int>(sizeof(typename Tr::T)));
  }
  return most;
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

// Launches a warp-rows kernel (forward or backward) on its persistent grid of
// at most max_grid blocks; the grid's size goes to *grid when asked for.
template <class Tr, int W, typename K, typename... Args>
cudaError_t LaunchWarpRows(K kernel, const MmaPlan& pl, const FusedMlpShape& s, const DeviceLimits& d,
                           int64_t max_grid, unsigned int* grid_out, cudaStream_t stream, Args... args) {
  const int smem = MmaSmemBytes(pl, 2);
  const int64_t rows_per_block = static_cast<int64_t>(pl.warps) * MmaTile<Tr, W>::kRows;
  unsigned int grid = 0;
  cudaError_t err = PersistentGrid(kernel, 32 * pl.warps, smem,
                                   std::min(max_grid, (s.n + rows_per_block - 1) / rows_per_block), d, &grid);
  if (err != cudaSuccess) return err;
  if (grid_out != nullptr) *grid_out = grid;
  kernel<<<grid, 32 * pl.warps, smem, stream>>>(args...);
  return cudaGetLastError();
}

template <class Tr>
struct MmaForwardLaunch {
  using T = typename Tr::T;
  template <int W>
  struct At {
    static cudaError_t Run(const T* x, const FusedMlpParams<T>& p, T* y, T* saved, const FusedMlpShape& s,
                           MmaPlan pl, const DeviceLimits& d, cudaStream_t stream) {
      return LaunchWarpRows<Tr, W>(MmaForwardKernel<Tr, W>, pl, s, d, INT64_MAX, nullptr, stream, x, p, y, saved,
                                   s, pl);
    }
  };
};

template <class Tr>
struct MmaBackwardLaunch {
  using T = typename Tr::T;
  template <int W>
  struct At {
    // fuse: weight gradients in the backward, into at most max_parts
    // per-block partials (their count to *parts).
    static cudaError_t Run(bool fuse, const T* dy, const T* y, const T* saved, const T* x,
                           const FusedMlpParams<T>& p, T* dx, const DzBuffers<T>& bufs, float* partials,
                           int64_t part_stride, int max_parts, unsigned int* parts, const FusedMlpShape& s,
                           MmaPlan pl, const DeviceLimits& d, cudaStream_t stream) {
      if (fuse) {
        return LaunchWarpRows<Tr, W>(MmaBackwardKernel<Tr, W, true>, pl, s, d, max_parts, parts, stream, dy, y,
                                     saved, x, p, dx, bufs, partials, part_stride, s, pl);
      }
      return LaunchWarpRows<Tr, W>(MmaBackwardKernel<Tr, W, false>, pl, s, d, INT64_MAX, nullptr, stream, dy, y,
                                   saved, x, p, dx, bufs, partials, part_stride, s, pl);
    }
  };
};

// The forward's plan has room for the biases; the backward reads none.
template <class Tr>
cudaError_t MmaPlanFor(bool forward, const FusedMlpShape& s, const void* x, const void* y, const void* dx,
                       const void* dy, DeviceLimits* d, MmaPlan* pl) {
  constexpr int kV = 16 / sizeof(typename Tr::T);  // elements per 16-byte piece
  cudaError_t err = QueryDevice(d);
  if (err != cudaSuccess) return err;
  if (!MakeMmaPlan<Tr>(s, 2, d->smem_optin, forward, pl)) return cudaErrorInvalidConfiguration;
  pl->x_vec = s.in_dim % kV == 0 && Aligned16(x);
  pl->y_vec = s.out_dim % kV == 0 && Aligned16(y);
  pl->dx_vec = s.in_dim % kV == 0 && (dx == nullptr || Aligned16(dx));
  pl->dy_vec = s.out_dim % 16 == 0 && dy != nullptr && Aligned16(dy) && Aligned16(y);
  return cudaSuccess;
}

template <class Tr>
cudaError_t MmaForward(const typename Tr::T* x, const FusedMlpParams<typename Tr::T>& p, typename Tr::T* y,
                       typename Tr::T* saved, const FusedMlpShape& s, cudaStream_t stream) {
  if (saved != nullptr && !Aligned16(saved)) return cudaErrorMisalignedAddress;
  DeviceLimits d;
  MmaPlan pl;
  cudaError_t err = MmaPlanFor<Tr>(true, s, x, y, nullptr, nullptr, &d, &pl);
  if (err != cudaSuccess) return err;
  return DispatchWidth<MmaForwardLaunch<Tr>::template At>(s.width, x, p, y, saved, s, pl, d, stream);
}

template <class Tr>
cudaError_t MmaBackward(const typename Tr::T* dy, const typename Tr::T* x, const typename Tr::T* y,
                        const typename Tr::T* saved, const FusedMlpParams<typename Tr::T>& p, typename Tr::T* dx,
                        const DzBuffers<typename Tr::T>& bufs, bool any_wgrad, float* partials, const WsLayout& ws,
                        int* parts, const FusedMlpShape& s, cudaStream_t stream) {
  if (!Aligned16(saved)) return cudaErrorMisalignedAddress;
  DeviceLimits d;
  MmaPlan pl;
  cudaError_t err = MmaPlanFor<Tr>(false, s, x, y, dx, dy, &d, &pl);
  if (err != cudaSuccess) return err;
  *parts = ws.splits;
  const int matrices = s.hidden_layers + 1;
  // With every weight resident the backward forms the weight gradients
  // itself, one partial per block: dL/dz stays on the chip, and the saved
  // activations are read once, not again by a second kernel.
  if (any_wgrad && pl.resident) {
    unsigned int grid = 0;
    err = DispatchWidth<MmaBackwardLaunch<Tr>::template At>(s.width, true, dy, y, saved, x, p, dx, bufs, partials,
                                                            ws.part_stride, ws.splits, &grid, s, pl, d, stream);
    *parts = static_cast<int>(grid);
    return err;
  }
  // The workspace holds dL/dz only on this path (BackwardPathOf).
  if (any_wgrad && ws.path != BackwardPath::kWgradKernel) return cudaErrorInvalidConfiguration;
  // dL/dz of a linear output layer is dy itself (dy * 1, exact): unpadded
  // and 16-byte aligned, the weight gradient reads dy, and the backward
  // writes no copy of it.
  DzBuffers<typename Tr::T> backward_bufs = bufs, wgrad_bufs = bufs;
  if (any_wgrad && s.output_activation == kActNone && pl.dy_vec && pl.np[matrices - 1] == s.out_dim) {
    backward_bufs.dz[matrices - 1] = nullptr;
    wgrad_bufs.dz[matrices - 1] = const_cast<typename Tr::T*>(dy);
  }
  err = DispatchWidth<MmaBackwardLaunch<Tr>::template At>(s.width, false, dy, y, saved, x, p, dx, backward_bufs,
                                                          partials, ws.part_stride, ws.splits, nullptr, s, pl, d,
                                                          stream);
  if (err != cudaSuccess || !any_wgrad) return err;
  const int wsmem = WgradSmemBytesMma<Tr>(pl, matrices);
  err = cudaFuncSetAttribute(MmaWgradKernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize, wsmem);
  if (err != cudaSuccess) return err;
  const int64_t rows_per_split = (s.n + ws.splits - 1) / ws.splits;
  MmaWgradKernel<Tr><<<dim3(ws.splits, matrices), 32 * kWgWarps, wsmem, stream>>>(
      x, saved, wgrad_bufs, partials, rows_per_split, ws.part_stride, s, pl);
  return cudaGetLastError();
}

}  // namespace

// The backward's own plan (MmaBackward), without its pointers: residency
// depends only on the shape and the device.
BackwardPath BackwardPathOf(const FusedMlpShape& s, size_t elem) {
  if (elem == sizeof(float) && FusedMlpUsesLayers(s)) return BackwardPath::kLayers;
  DeviceLimits d;
  MmaPlan pl;
  const cudaError_t err =
      elem == sizeof(float) ? MmaPlanFor<Tf32Mma>(false, s, nullptr, nullptr, nullptr, nullptr, &d, &pl)
                            : MmaPlanFor<HalfMma>(false, s, nullptr, nullptr, nullptr, nullptr, &d, &pl);
  return err == cudaSuccess && pl.resident ? BackwardPath::kFusedWgrad : BackwardPath::kWgradKernel;
}

cudaError_t Forward(const __half* x, const FusedMlpParams<__half>& p, __half* y, __half* saved,
                       const FusedMlpShape& s, cudaStream_t stream) {
  return MmaForward<HalfMma>(x, p, y, saved, s, stream);
}

cudaError_t Backward(const __half* dy, const __half* x, const __half* y, const __half* saved,
                        const FusedMlpParams<__half>& p, __half* dx, const DzBuffers<__half>& bufs,
                        bool any_wgrad, float* partials, const WsLayout& ws, int* parts, const FusedMlpShape& s,
                        cudaStream_t stream) {
  return MmaBackward<HalfMma>(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, parts, s, stream);
}

cudaError_t ForwardTf32(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream) {
  return MmaForward<Tf32Mma>(x, p, y, saved, s, stream);
}

cudaError_t BackwardTf32(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const DzBuffers<float>& bufs, bool any_wgrad,
                         float* partials, const WsLayout& ws, int* parts, const FusedMlpShape& s,
                         cudaStream_t stream) {
  return MmaBackward<Tf32Mma>(dy, x, y, saved, p, dx, bufs, any_wgrad, partials, ws, parts, s, stream);
}

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo
