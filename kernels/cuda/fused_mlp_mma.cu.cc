// FusedMLP on tensor cores (the launchers are fused_mlp.cu.cc): float16 by
// mma.sync m16n8k16, float32 by TF32 mma.sync m16n8k8 (HalfMma, Tf32Mma below),
// both with float accumulation. Activation formulas come from
// kernels/common/activations.h.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/activations.h"
#include "kernels/cuda/fused_mlp_impl.h"
#include "kernels/cuda/sum_parts.h"

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

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

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

// af = act(acc) in the element kind: C of k-step kk's n-tiles -> A of k-step kk.
template <class Tr, int MT, int KT>
__device__ __forceinline__ void ActPack(uint32_t (&af)[MT][KT][4], const float (&acc)[MT][Tr::kCTiles * KT][4],
                                        int act, float alpha) {
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        Tr::MakeA(af[mt][kk], [&](int q, int r) { return ActF<A>(acc[mt][Tr::kCTiles * kk + q][r], act, alpha); });
      }
    }
  });
}

// The layer input h (kRows x kK*KT in shared memory) at the C positions, as
// stored: read before its buffer takes the next layer's input.
template <class Tr, int MT, int KT>
__device__ __forceinline__ void LoadCFrags(uint32_t (&hf)[MT][KT][4], const typename Tr::T* hs, int ld, int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) Tr::LoadC(hf[mt][kk], hs + mt * 16 * ld, ld, kk, lane);
  }
}

// dz = acc * act'(h) in the element kind; hk(mt, kk, h) gives h, the layer
// input at the C positions of m-tile mt, k-step kk, as stored (Tr::LoadC).
template <class Tr, int MT, int KT, typename HK>
__device__ __forceinline__ void DerivPack(uint32_t (&dz)[MT][KT][4], const float (&acc)[MT][Tr::kCTiles * KT][4],
                                          HK&& hk, int act, float alpha) {
  DispatchAct(act, [&](auto a) {
    constexpr int A = decltype(a)::value;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        uint32_t hr[4];
        hk(mt, kk, hr);
        float h[Tr::kCTiles][4];
        Tr::CValues(h, hr);
        Tr::MakeA(dz[mt][kk], [&](int q, int r) {
          return acc[mt][Tr::kCTiles * kk + q][r] * ActD<A>(h[q][r], act, alpha);
        });
      }
    }
  });
}

// A fragments -> staging rows (kRows x kK*KT).
template <class Tr, int MT, int KT>
__device__ __forceinline__ void StoreFrags(typename Tr::T* st, int ld, const uint32_t (&af)[MT][KT][4], int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) Tr::StoreA(st + mt * 16 * ld, ld, af[mt][kk], kk, lane);
  }
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

// Weight l for this layer: resident, or loaded now by the whole block.
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
#pragma unroll
    for (int i = 0; i < kMaxTiles; ++i) {
      const int t = warp + i * kWgWarps;
      if (t < tiles) {
        const int m0 = (t / tn) * 16, n0 = (t % tn) * 16;
#pragma unroll
        for (int kk = 0; kk < kWgChunk / Tr::kK; ++kk) {
          WgradKStep<Tr, 1, 1, true>(acc[i], dbacc, i == 0 && db_warp ? 3u : 0u, sa, lda, sb, ldb, m0, n0, kk, lane);
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
        part[(m0 + Tr::WgradRow(g, 0)) * np + c] = acc[i][0][h][0];
        part[(m0 + Tr::WgradRow(g, 0)) * np + c + 1] = acc[i][0][h][1];
        part[(m0 + Tr::WgradRow(g, 1)) * np + c] = acc[i][0][h][2];
        part[(m0 + Tr::WgradRow(g, 1)) * np + c + 1] = acc[i][0][h][3];
      }
    }
  }
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
  // fixed order, through the (now idle) staging.
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
