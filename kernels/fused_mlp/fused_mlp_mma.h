// The tensor-core building blocks of FusedMLP's CUDA kernels, shared by the
// fused path (fused_mlp_mma.cu.cc: rows in registers through every layer) and
// the TF32 layer path's backward kernels (fused_mlp_layers_tf32.cu.cc): PTX
// wrappers (ldmatrix, cp.async, L2 policies), the mma of each element kind
// (HalfMma: float16 m16n8k16; Tf32Mma: TF32 m16n8k8; both with float
// accumulation), row staging through shared memory, and the device queries
// and width dispatch of the launchers. Device code (nvcc only); no TensorFlow.
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_MMA_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_MMA_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/fused_mlp/fused_mlp.h"

namespace mo {
namespace cuda {
namespace fused_mlp_impl {

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

// L2 policies: kL2Keep (evict_last) for lines read again soon, past the
// streamed ones (the backward's per-block weight-gradient partials, rewritten
// every round); kL2Normal gives them back on their last write; kL2Stream
// (evict_first) for data read once.
enum L2Priority { kL2Stream, kL2Normal, kL2Keep };
__device__ __forceinline__ uint64_t L2Policy(L2Priority p) {
  uint64_t policy;
  if (p == kL2Keep) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  } else if (p == kL2Normal) {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  }
  return policy;
}

// 16 bytes global -> shared, zero-filled when !valid.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
// The same under an L2 policy (L2Policy).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(SmemAddr(dst)),
               "l"(src), "r"(valid ? 16 : 0), "l"(policy));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 8 bytes of global memory under an L2 policy (L2Policy): stored, or added
// to in L2 (red: nothing comes back, so no register waits on the old value;
// one thread's reductions of one address apply in its program order).
__device__ __forceinline__ void StoreHinted(float* p, float2 v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(p), "f"(v.x), "f"(v.y), "l"(policy)
               : "memory");
}
// A vector red needs sm_90 (PTX ISA 8.1); before it, two 4-byte ones.
__device__ __forceinline__ void AddHinted(float* p, float2 v, uint64_t policy) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(p), "f"(v.x), "f"(v.y),
               "l"(policy)
               : "memory");
#else
  asm volatile("red.global.add.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(p), "f"(v.x), "l"(policy) : "memory");
  asm volatile("red.global.add.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(p + 1), "f"(v.y), "l"(policy) : "memory");
#endif
}
// The same for 4 bytes.
__device__ __forceinline__ void StoreHinted(float* p, float v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(p), "f"(v), "l"(policy) : "memory");
}
__device__ __forceinline__ void AddHinted(float* p, float v, uint64_t policy) {
  asm volatile("red.global.add.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(p), "f"(v), "l"(policy) : "memory");
}
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float2 Unpack(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

__device__ __forceinline__ float ToF(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF(float v) { return v; }
template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ __half FromF<__half>(float v) { return __float2half(v); }
template <>
__device__ __forceinline__ float FromF<float>(float v) { return v; }

// float -> TF32 (10-bit mantissa), round to nearest, ties away from zero.
__device__ __forceinline__ uint32_t Tf32(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

// What the kernels do differently per element kind. Shared by both: the C
// fragment (n8 tile; lane (g = lane / 4, t = lane % 4) holds (g, 2t), (g, 2t+1),
// (g+8, 2t), (g+8, 2t+1)), 4 A and 2 B registers per mma, k-steps of kK, the
// staging rows (ld = d + kSkew elements). Weights in shared memory: element
// (r, c) of matrix [kp][np] at WIdx(r, c, Ld(np, trans), trans), trans = B is W
// ([K][N], the forward), else B = W^T (the backward).
struct HalfMma {
  using T = __half;
  static constexpr int kK = 16;         // k of one mma
  static constexpr int kCTiles = 2;     // C n8-tiles that make one A k-step
  static constexpr int kSkew = 8;       // elements of row padding: ldmatrix rows hit distinct banks
  static constexpr int kWgChunk = 64;   // rows per weight-gradient pipeline stage
  static constexpr uint32_t kOnes = 0x3C003C00u;  // a pair of half 1.0
  static constexpr bool kDbBySum = false;         // column sums: an all-ones mma (WgradKStep)
  // BlockWgrad with the staging strides as immediates where they are W's:
  // width 128 only (docs/FUSED_MLP_GPU.md, "Address arithmetic").
  static constexpr bool FixedWgradStrides(int width) { return width >= 128; }
  // m16 tiles per warp: 64 float accumulators per thread at every width
  // (16 warps of 128 registers; the alternatives tried: docs/FUSED_MLP_GPU.md).
  static constexpr int MTiles(int width) { return width >= 128 ? 1 : 128 / width; }
  static constexpr int MaxWarps(int) { return 16; }  // 512 threads: 128 registers per thread at most

  static __host__ __device__ int Ld(int np, bool) { return np + kSkew; }
  static __device__ int WIdx(int r, int c, int ld, bool) { return r * ld + c; }
  static __device__ int ColOff(int c, bool) { return c; }
  static __device__ T Operand(T v) { return v; }
  static constexpr bool kStagedRounds = false;

  static __device__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  // B fragments of k-step kk and n-tiles 2j, 2j+1 (b[0..1], b[2..3]).
  // trans: B = W stored [K][N] (forward). !trans: B = W^T with W stored [N][K].
  template <bool TRANS>
  static __device__ void LoadB(uint32_t (&b)[4], const T* w, int ldw, int kk, int j, int lane) {
    if (TRANS) {
      Ldsm4T(b, w + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ldw + j * 16 + (lane >> 4) * 8);
    } else {
      Ldsm4(b, w + (j * 16 + (lane & 7) + (lane >> 4) * 8) * ldw + kk * 16 + ((lane >> 3) & 1) * 8);
    }
  }

  // A fragment of k-step kk of the 16 rows at a (row-major, ld).
  static __device__ void LoadA(uint32_t (&af)[4], const T* a, int ld, int kk, int lane) {
    Ldsm4(af, a + (lane & 15) * ld + kk * 16 + (lane >> 4) * 8);
  }

  // A fragment from the values v(q, r) of register r of C tile q (of kCTiles).
  template <typename V>
  static __device__ void MakeA(uint32_t (&a)[4], V&& v) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      a[2 * q] = Pack(v(q, 0), v(q, 1));
      a[2 * q + 1] = Pack(v(q, 2), v(q, 3));
    }
  }

  // The elements at the C positions of k-step kk's tiles, of the 16 rows at
  // s, as stored (CValues unpacks them).
  static __device__ void LoadC(uint32_t (&h)[4], const T* s, int ld, int kk, int lane) {
    Ldsm4(h, s + (lane & 15) * ld + kk * 16 + (lane >> 4) * 8);
  }
  static __device__ void CValues(float (&hv)[2][4], const uint32_t (&h)[4]) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float2 h0 = Unpack(h[2 * q]), h1 = Unpack(h[2 * q + 1]);
      hv[q][0] = h0.x;
      hv[q][1] = h0.y;
      hv[q][2] = h1.x;
      hv[q][3] = h1.y;
    }
  }

  // A fragment of k-step kk -> the 16 rows at s.
  static __device__ void StoreA(T* s, int ld, const uint32_t (&a)[4], int kk, int lane) {
    T* p = s + (lane >> 2) * ld + kk * 16 + 2 * (lane & 3);
    *reinterpret_cast<uint32_t*>(p) = a[0];
    *reinterpret_cast<uint32_t*>(p + 8 * ld) = a[1];
    *reinterpret_cast<uint32_t*>(p + 8) = a[2];
    *reinterpret_cast<uint32_t*>(p + 8 * ld + 8) = a[3];
  }

  static __device__ void StorePair(T* p, float v0, float v1) { *reinterpret_cast<uint32_t*>(p) = Pack(v0, v1); }

  // Weight gradient: A = X^T (X staged [k][m]) of m-tile m0, and B (dz
  // staged [k][n]) of n-tiles n0, n0 + 8, at k-step kk. The row of X^T that
  // C row g + 8h (register 2h, 2h + 1) holds: the PTX layout.
  static __device__ int WgradRow(int g, int h) { return g + 8 * h; }
  template <bool kRound>
  static __device__ void WgradA(uint32_t (&af)[4], const T* sa, int lda, int m0, int kk, int lane) {
    // A = X^T: X rows are k, so ldmatrix.trans of [k][m] pieces.
    Ldsm4T(af, sa + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * lda + m0 + ((lane >> 3) & 1) * 8);
  }
  template <bool kRound>
  static __device__ void WgradB(uint32_t (&b)[4], const T* sb, int ldb, int n0, int kk, int lane) {
    Ldsm4T(b, sb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ldb + n0 + (lane >> 4) * 8);
  }
};

// float32 on TF32 tensor cores (m16n8k8). PTX fragments: A (g, t), (g+8, t),
// (g, t+4), (g+8, t+4) in a0..a3; B (k t, n g), (k t+4, n g) in b0, b1. Any k
// order serves a dot product if A and B follow it, so k-slot t holds k = 2t and
// k-slot t+4 holds k = 2t+1: then A of k-step j is the thread's own C of n-tile
// j, a = (c0, c2, c1, c3), and B is b0 = W[8j+2t][n], b1 = W[8j+2t+1][n].
// Every operand is rounded to TF32 (cvt.rna) before the mma: weights once,
// into shared memory; activations and dL/dz as they become A fragments (so
// the saved activations and dL/dz are TF32 values); x and the output layer's
// dL/dz (fp32 in memory) where they are read. The weight-gradient kernel
// keeps the PTX k order (its k is the batch, staged in shared memory).
// Shared-memory layouts are chosen so that every fragment load is one
// conflict-free 64-bit ld.shared (or, in the weight gradient, 32-bit).
struct Tf32Mma {
  using T = float;
  static constexpr int kK = 8;
  static constexpr int kCTiles = 1;
  static constexpr int kSkew = 8;       // staging rows and W^T rows: ld = 8 (mod 16) floats
  static constexpr int kWgChunk = 32;   // 3 stages of 32 float rows: two blocks per SM at width 128
  static constexpr uint32_t kOnes = 0x3F800000u;  // 1.0f
  // Column sums of one 16 x 16 weight-gradient tile: two FADD per n8 tile and
  // k-step (ColSum), cheaper than an all-ones m16n8k8 (its A quad, warp syncs).
  static constexpr bool kDbBySum = true;
  // BlockWgrad with the staging strides as immediates where they are W's.
  static constexpr bool FixedWgradStrides(int) { return true; }
  // A fragments take as many registers as the accumulators: 32 + 32 per
  // thread below width 128 (16 warps); at 128, 64 + 64 (8 warps of up to 255).
  static constexpr int MTiles(int width) { return width >= 64 ? 1 : 64 / width; }
  static constexpr int MaxWarps(int width) { return width >= 128 ? 8 : 16; }

  // trans (forward): rows in pairs, element (r, c) at ((r/2) * ld + c) * 2 + r%2
  // with ld = np + 4 pairs, so b0, b1 (rows 2t, 2t+1) are one float2 and the 8
  // columns x 4 pairs of a half-warp hit distinct banks. !trans (backward): row
  // major, ld = np + 8, b0, b1 adjacent in row n.
  static __host__ __device__ int Ld(int np, bool trans) { return trans ? np + 4 : np + kSkew; }
  static __device__ int WIdx(int r, int c, int ld, bool trans) {
    return trans ? ((r >> 1) * ld + c) * 2 + (r & 1) : r * ld + c;
  }
  static __device__ int ColOff(int c, bool trans) { return trans ? 2 * c : c; }
  // A value as the products take it: weights as they enter shared memory,
  // and x and the output's dz where the fused weight gradient stages them
  // (it takes staged values without rounding them again, WgradIn<false>).
  static __device__ T Operand(T v) { return __uint_as_float(Tf32(v)); }
  static constexpr bool kStagedRounds = true;

  static __device__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  template <bool TRANS>
  static __device__ void LoadB(uint32_t (&b)[4], const T* w, int ldw, int kk, int j, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = j * 16 + h * 8 + g;
      const float2 v = *reinterpret_cast<const float2*>(TRANS ? w + ((kk * 4 + t) * ldw + n) * 2
                                                              : w + n * ldw + kk * 8 + 2 * t);
      b[2 * h] = __float_as_uint(v.x);
      b[2 * h + 1] = __float_as_uint(v.y);
    }
  }

  // kRound false: the values go in as they are (the tensor cores truncate).
  template <bool kRound = true>
  static __device__ void LoadA(uint32_t (&af)[4], const T* a, int ld, int kk, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const float2 lo = *reinterpret_cast<const float2*>(a + g * ld + kk * 8 + 2 * t);
    const float2 hi = *reinterpret_cast<const float2*>(a + (g + 8) * ld + kk * 8 + 2 * t);
    af[0] = WgradIn<kRound>(lo.x);
    af[1] = WgradIn<kRound>(hi.x);
    af[2] = WgradIn<kRound>(lo.y);
    af[3] = WgradIn<kRound>(hi.y);
  }

  template <typename V>
  static __device__ void MakeA(uint32_t (&a)[4], V&& v) {
    a[0] = Tf32(v(0, 0));
    a[1] = Tf32(v(0, 2));
    a[2] = Tf32(v(0, 1));
    a[3] = Tf32(v(0, 3));
  }

  static __device__ void LoadC(uint32_t (&h)[4], const T* s, int ld, int kk, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const float2 lo = *reinterpret_cast<const float2*>(s + g * ld + kk * 8 + 2 * t);
    const float2 hi = *reinterpret_cast<const float2*>(s + (g + 8) * ld + kk * 8 + 2 * t);
    h[0] = __float_as_uint(lo.x);
    h[1] = __float_as_uint(lo.y);
    h[2] = __float_as_uint(hi.x);
    h[3] = __float_as_uint(hi.y);
  }
  static __device__ void CValues(float (&hv)[1][4], const uint32_t (&h)[4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) hv[0][r] = __uint_as_float(h[r]);
  }

  // Four 32-bit stores: a 64-bit one would hold a0, a2 (and a1, a3) in a
  // register pair, which the mma's A quad (a0..a3) cannot share, so every mma
  // of the fragment would copy it. Rows g and g + 4 (same banks: ld = 8 mod
  // 16) store their two columns in opposite orders: each store hits 32 banks.
  static __device__ void StoreA(T* s, int ld, const uint32_t (&a)[4], int kk, int lane) {
    const int h = (lane >> 4) & 1;  // g >= 4
    T* p = s + (lane >> 2) * ld + kk * 8 + 2 * (lane & 3);
    p[h] = __uint_as_float(h ? a[2] : a[0]);
    p[1 - h] = __uint_as_float(h ? a[0] : a[2]);
    p[8 * ld + h] = __uint_as_float(h ? a[3] : a[1]);
    p[8 * ld + 1 - h] = __uint_as_float(h ? a[1] : a[3]);
  }

  static __device__ void StorePair(T* p, float v0, float v1) { *reinterpret_cast<float2*>(p) = make_float2(v0, v1); }

  // PTX k order. A's rows are permuted: row g is column m0 + 2g of X and row
  // g + 8 column m0 + 2g + 1 (WgradRow puts C back), so a0, a1 and a2, a3 are
  // one 64-bit load each; B stays in PTX order (its pairs are a column's rows
  // t, t + 4). ld = 8 (mod 16) makes rows t and t + 4 of 8 columns (or 8
  // pairs of a half-warp) distinct banks.
  // kRound: the staged values may be any float32 (rounded here, per load);
  // otherwise they are TF32 values already (Operand, where staged) and go in
  // as they are.
  static __device__ int WgradRow(int g, int h) { return 2 * g + h; }
  // Column g of an n8 tile over the k slots t, t + 4 of B (b0, b1).
  static __device__ float ColSum(uint32_t b0, uint32_t b1) { return __uint_as_float(b0) + __uint_as_float(b1); }
  template <bool kRound>
  static __device__ uint32_t WgradIn(float v) { return kRound ? Tf32(v) : __float_as_uint(v); }
  template <bool kRound>
  static __device__ void WgradA(uint32_t (&af)[4], const T* sa, int lda, int m0, int kk, int lane) {
    const T* a0 = sa + (kk * 8 + (lane & 3)) * lda + m0 + 2 * (lane >> 2);
    const float2 lo = *reinterpret_cast<const float2*>(a0);
    const float2 hi = *reinterpret_cast<const float2*>(a0 + 4 * lda);
    af[0] = WgradIn<kRound>(lo.x);
    af[1] = WgradIn<kRound>(lo.y);
    af[2] = WgradIn<kRound>(hi.x);
    af[3] = WgradIn<kRound>(hi.y);
  }
  template <bool kRound>
  static __device__ void WgradB(uint32_t (&b)[4], const T* sb, int ldb, int n0, int kk, int lane) {
    const T* b0 = sb + (kk * 8 + (lane & 3)) * ldb + n0 + (lane >> 2);
    b[0] = WgradIn<kRound>(b0[0]);
    b[1] = WgradIn<kRound>(b0[4 * ldb]);
    b[2] = WgradIn<kRound>(b0[8]);
    b[3] = WgradIn<kRound>(b0[4 * ldb + 8]);
  }
};

// 16-byte aligned: cp.async and vector loads serve the pointer.
inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Rows [row0, row0 + rows) of a row-major [n, cols] matrix -> staging
// (cols_p >= cols columns, zero-padded; rows past n are zeros), by `threads`
// threads of which this is `tid` (a warp's lanes, or a block's threads). vec:
// cp.async of 16-byte pieces (the caller waits; under *policy when given),
// else element loads.
template <typename T>
__device__ __forceinline__ void LoadRows(T* st, int ld, const T* g, int64_t row0, int rows, int64_t n, int cols,
                                         int cols_p, bool vec, int tid, const uint64_t* policy = nullptr,
                                         int threads = 32) {
  constexpr int kV = 16 / sizeof(T);
  if (vec) {
    const int per_row = cols / kV;
    for (int e = tid; e < rows * per_row; e += threads) {
      const int r = e / per_row, c = (e - r * per_row) * kV;
      const int64_t row = row0 + r;
      const bool ok = row < n;
      if (policy != nullptr) {
        CpAsync16(st + r * ld + c, g + (ok ? row * cols + c : 0), ok, *policy);
      } else {
        CpAsync16(st + r * ld + c, g + (ok ? row * cols + c : 0), ok);
      }
    }
    if (cols_p > cols) {
      for (int e = tid; e < rows * (cols_p - cols); e += threads) {
        const int r = e / (cols_p - cols);
        st[r * ld + cols + (e - r * (cols_p - cols))] = FromF<T>(0.0f);
      }
    }
  } else {
    for (int e = tid; e < rows * cols_p; e += threads) {
      const int r = e / cols_p, c = e - r * cols_p;
      const int64_t row = row0 + r;
      st[r * ld + c] = (row < n && c < cols) ? g[row * cols + c] : FromF<T>(0.0f);
    }
  }
}

// What the launchers size their grids and shared memory by.
struct DeviceLimits {
  int sms, smem_optin;
};

inline cudaError_t QueryDevice(DeviceLimits* d) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  }
  return err;
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

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_MMA_H_
