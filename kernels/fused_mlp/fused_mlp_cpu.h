// The CPU FusedMLP (forward and backward), free of TensorFlow: the op's
// functor (kernels/fused_mlp/fused_mlp_kernels.cc) hands it pointers and a
// parallel-for. Design (docs/FUSED_MLP.md, "CPU kernels"):
//  - Blocks of kBlockRows rows go through every layer while the block's
//    activations are in L1/L2. Row-major everywhere (the layout of x, y and
//    the op's `hidden` [L, N, W]), vectorised across a layer's output columns.
//  - One register-tiled micro-kernel (Tile) does every product: R rows x JC
//    vectors of accumulators, a scalar broadcast from A and JC vector loads
//    from B per step of the reduction. The forward, the input gradient
//    (dz W^T) and the weight gradient (h^T dz, its "rows" being the input
//    features and its reduction the block's rows) are all this kernel with
//    other strides; bias + activation (forward) and the activation's
//    derivative (backward) run on the accumulators before they are stored.
//  - Weights are packed once per call: the output layer zero-padded to whole
//    vectors, and every layer transposed for the backward.
//  - The hidden width W is a template argument (16/32/64/128 selected once,
//    in Dispatch), so the column loops and the tile shape are compile-time.
//  - Weight and bias gradients accumulate per partition of the rows (their
//    number depends on N only), partitions added in order afterwards: bitwise
//    deterministic for any thread count.
// Activations: vector forms of kernels/common/activations.h's formulas
// (softplus goes lane by lane through activations.h itself).
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_CPU_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_CPU_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/common/activations.h"
#include "kernels/cpu/activations_simd.h"
#include "kernels/cpu/simd.h"

namespace mo {
namespace fused_mlp_cpu {

using simd::ActDerivative;
using simd::ActForward;
using simd::kLanes;
using simd::V;

constexpr int64_t kBlockRows = 128;     // a block's [128, 128] floats: 64 KiB, in L2 (L1 for W <= 64)
constexpr int64_t kMaxPartitions = 64;  // weight-gradient partial sums: fixed, independent of threads

struct Shape {
  int64_t n;
  int in, width, hidden_layers, out;
  int act, out_act;  // kernels/common/activations.h's numbers
  float alpha;       // leaky_relu's slope
};

struct ForwardPtrs {
  const float* x;
  const float* const* kernels;  // hidden_layers + 1, Keras layout [rows, cols]
  const float* const* biases;
  float* y;
  float* hidden;  // [hidden_layers, n, width]; may be null: not kept (inference)
};

struct BackwardPtrs {
  const float *grad_y, *x, *y, *hidden;
  const float* const* kernels;
  float* grad_x;  // may be null: not computed
  float* const* grad_kernels;  // entries may be null: not wanted
  float* const* grad_biases;
};

inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// ---- the micro-kernel ----------------------------------------------------------------

// C[i][j] = sum_k A[i * a_i + k * a_k] * B[k * ldb + j] for R rows i and JC
// vectors of columns j; init(i, c) gives the accumulator's start, fin(i, c, v)
// takes the result (c counts vectors).
template <int R, int JC, typename Init, typename Fin>
MO_INLINE void Tile(int64_t K, const float* a, int64_t a_i, int64_t a_k, const float* b, int64_t ldb,
                    const Init& init, const Fin& fin) {
  V acc[R][JC];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < JC; ++c) acc[i][c] = init(i, c);
  for (int64_t k = 0; k < K; ++k) {
    V bv[JC];
    for (int c = 0; c < JC; ++c) bv[c] = simd::Load(b + k * ldb + c * kLanes);
    for (int i = 0; i < R; ++i) {
      const V av = simd::Set(a[i * a_i + k * a_k]);
      for (int c = 0; c < JC; ++c) acc[i][c] = simd::Fma(av, bv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < JC; ++c) fin(i, c, acc[i][c]);
}

// Rows per tile for JC vectors of columns: as many accumulators as the
// register file holds next to the B vectors and the broadcast.
template <int JC>
constexpr int TileRows() {
  constexpr int budget = simd::kRegisters == 32 ? 24 : 12;
  return std::max(1, std::min(12, budget / JC));
}

// The widest column chunk (vectors) one tile takes.
constexpr int kMaxChunk = simd::kRegisters == 32 ? 8 : 4;

// A product over M rows and JC vectors of columns (JC <= kMaxChunk): full
// tiles of TileRows<JC>() rows, then one tile of the remaining rows.
// init(row, c) / fin(row, c, v) with the absolute row.
template <int JC, typename Init, typename Fin>
MO_INLINE void Rows(int64_t M, int64_t K, const float* a, int64_t a_i, int64_t a_k, const float* b, int64_t ldb,
                    const Init& init, const Fin& fin) {
  constexpr int R = TileRows<JC>();
  int64_t i0 = 0;
  for (; i0 + R <= M; i0 += R) {
    Tile<R, JC>(K, a + i0 * a_i, a_i, a_k, b, ldb, [&](int i, int c) { return init(i0 + i, c); },
                [&](int i, int c, V v) { fin(i0 + i, c, v); });
  }
  const int rest = static_cast<int>(M - i0);
  if (rest == 0) return;
  auto in = [&](int i, int c) { return init(i0 + i, c); };
  auto out = [&](int i, int c, V v) { fin(i0 + i, c, v); };
  const float* ar = a + i0 * a_i;
  // Unrolled by the compiler per remainder; R <= 12.
  switch (rest) {
#define MO_FUSED_MLP_REST(r) \
  case r:                    \
    if constexpr (r < R) Tile<r, JC>(K, ar, a_i, a_k, b, ldb, in, out); \
    return;
    MO_FUSED_MLP_REST(1)
    MO_FUSED_MLP_REST(2)
    MO_FUSED_MLP_REST(3)
    MO_FUSED_MLP_REST(4)
    MO_FUSED_MLP_REST(5)
    MO_FUSED_MLP_REST(6)
    MO_FUSED_MLP_REST(7)
    MO_FUSED_MLP_REST(8)
    MO_FUSED_MLP_REST(9)
    MO_FUSED_MLP_REST(10)
    MO_FUSED_MLP_REST(11)
#undef MO_FUSED_MLP_REST
    default: return;
  }
}

// The product over all `vecs` vectors of columns, in chunks of at most
// kMaxChunk; init / fin get the absolute column vector.
template <typename Init, typename Fin>
MO_INLINE void Gemm(int64_t M, int64_t K, int vecs, const float* a, int64_t a_i, int64_t a_k, const float* b,
                    int64_t ldb, const Init& init, const Fin& fin) {
  for (int c0 = 0; c0 < vecs; c0 += kMaxChunk) {
    const int jc = std::min(kMaxChunk, vecs - c0);
    const float* bc = b + c0 * kLanes;
    auto in = [&](int64_t i, int c) { return init(i, c0 + c); };
    auto out = [&](int64_t i, int c, V v) { fin(i, c0 + c, v); };
    switch (jc) {
#define MO_FUSED_MLP_CHUNK(j)                                      \
  case j:                                                          \
    if constexpr (j <= kMaxChunk) Rows<j>(M, K, a, a_i, a_k, bc, ldb, in, out); \
    break;
      MO_FUSED_MLP_CHUNK(1)
      MO_FUSED_MLP_CHUNK(2)
      MO_FUSED_MLP_CHUNK(3)
      MO_FUSED_MLP_CHUNK(4)
      MO_FUSED_MLP_CHUNK(5)
      MO_FUSED_MLP_CHUNK(6)
      MO_FUSED_MLP_CHUNK(7)
      MO_FUSED_MLP_CHUNK(8)
#undef MO_FUSED_MLP_CHUNK
      default: break;
    }
  }
}

// Stores the columns [c * kLanes, cols) of a vector.
MO_INLINE void StoreCols(float* p, int c, int cols, V v) {
  const int left = cols - c * kLanes;
  if (left >= kLanes) {
    simd::Store(p + c * kLanes, v);
  } else {
    simd::StoreN(p + c * kLanes, v, left);
  }
}

// ---- weights packed once per call ----------------------------------------------------

struct Packed {
  int out_pad = 0, in_pad = 0;
  std::vector<float> w_out, b_out;   // output layer [W, out_pad], [out_pad] (zero-padded)
  std::vector<std::vector<float>> wt;  // backward: W_l^T [cols, rows_pad]
};

inline void PackForward(const Shape& s, const float* const* kernels, const float* const* biases, Packed* p) {
  const int W = s.width, L = s.hidden_layers;
  p->out_pad = static_cast<int>(RoundUp(s.out, kLanes));
  p->w_out.assign(static_cast<size_t>(W) * p->out_pad, 0.0f);
  p->b_out.assign(p->out_pad, 0.0f);
  for (int k = 0; k < W; ++k)
    std::copy(kernels[L] + k * s.out, kernels[L] + (k + 1) * s.out, p->w_out.begin() + k * p->out_pad);
  std::copy(biases[L], biases[L] + s.out, p->b_out.begin());
}

inline void PackBackward(const Shape& s, const float* const* kernels, Packed* p) {
  const int L = s.hidden_layers;
  p->out_pad = static_cast<int>(RoundUp(s.out, kLanes));
  p->in_pad = static_cast<int>(RoundUp(s.in, kLanes));
  p->wt.resize(L + 1);
  for (int l = 0; l <= L; ++l) {
    const int rows = l == 0 ? s.in : s.width, cols = l == L ? s.out : s.width;
    const int rows_pad = l == 0 ? p->in_pad : s.width;
    p->wt[l].assign(static_cast<size_t>(cols) * rows_pad, 0.0f);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) p->wt[l][c * rows_pad + r] = kernels[l][r * cols + c];
  }
}

// ---- forward -------------------------------------------------------------------------

// Rows [r0, r0 + m) through every layer; without p.hidden the layers
// alternate between the two [kBlockRows, W] halves of `scratch`.
template <int W>
void ForwardBlock(const Shape& s, const ForwardPtrs& p, const Packed& pk, int64_t r0, int64_t m, float* scratch) {
  constexpr int kVecs = W / kLanes;
  const int L = s.hidden_layers;
  const float* prev = p.x + r0 * s.in;
  int64_t lda = s.in;
  for (int l = 0; l < L; ++l) {
    float* h = p.hidden != nullptr ? p.hidden + (l * s.n + r0) * W : scratch + (l % 2) * kBlockRows * W;
    const float* bias = p.biases[l];
    Gemm(m, lda, kVecs, prev, lda, 1, p.kernels[l], W, [&](int64_t, int c) { return simd::Load(bias + c * kLanes); },
         [&](int64_t i, int c, V v) { simd::Store(h + i * W + c * kLanes, ActForward(v, s.act, s.alpha)); });
    prev = h;
    lda = W;
  }
  float* y = p.y + r0 * s.out;
  const float* bias = pk.b_out.data();
  Gemm(m, W, pk.out_pad / kLanes, prev, W, 1, pk.w_out.data(), pk.out_pad,
       [&](int64_t, int c) { return simd::Load(bias + c * kLanes); },
       [&](int64_t i, int c, V v) { StoreCols(y + i * s.out, c, s.out, ActForward(v, s.out_act, s.alpha)); });
}

// ---- backward ------------------------------------------------------------------------

// Per-partition accumulators of every layer's weight and bias gradients:
// [rows, cols] for the hidden layers, the output layer's transposed
// [out, W] (so that its narrow side is the tile's rows, not padded vectors),
// its bias [out_pad].
struct GradLayout {
  std::vector<int64_t> w, b;  // offsets per layer
  int64_t size = 0;
};

inline GradLayout MakeGradLayout(const Shape& s, int out_pad) {
  GradLayout g;
  for (int l = 0; l <= s.hidden_layers; ++l) {
    const int64_t rows = l == 0 ? s.in : s.width, cols = l == s.hidden_layers ? out_pad : s.width;
    g.w.push_back(g.size);
    g.size += RoundUp(rows * cols, kLanes);
    g.b.push_back(g.size);
    g.size += RoundUp(cols, kLanes);
  }
  return g;
}

// acc [rows, vecs * kLanes] += A^T B over the block's m rows (A [m, rows] with
// row stride lda, B [m, vecs * kLanes] with row stride ldb).
MO_INLINE void AccumulateProduct(int64_t m, int64_t rows, int vecs, const float* a, int64_t lda, const float* b,
                                 int64_t ldb, float* acc) {
  const int64_t cols = static_cast<int64_t>(vecs) * kLanes;
  Gemm(rows, m, vecs, a, 1, lda, b, ldb, [&](int64_t i, int c) { return simd::Load(acc + i * cols + c * kLanes); },
       [&](int64_t i, int c, V v) { simd::Store(acc + i * cols + c * kLanes, v); });
}

// acc_b [vecs * kLanes] += the column sums of dz (row stride ld), row by row:
// the same order whatever the vector width.
MO_INLINE void AccumulateColumnSums(int64_t m, int vecs, const float* dz, int64_t ld, float* acc_b) {
  for (int c = 0; c < vecs; ++c) {
    V sum = simd::Load(acc_b + c * kLanes);
    for (int64_t r = 0; r < m; ++r) sum = simd::Add(sum, simd::Load(dz + r * ld + c * kLanes));
    simd::Store(acc_b + c * kLanes, sum);
  }
}

// acc_w [rows, vecs * kLanes] += A^T dz, acc_b += the column sums of dz.
MO_INLINE void AccumulateWeightGrad(int64_t m, int64_t rows, int vecs, const float* a, int64_t lda,
                                    const float* dz, float* acc_w, float* acc_b) {
  const int64_t cols = static_cast<int64_t>(vecs) * kLanes;
  AccumulateProduct(m, rows, vecs, a, lda, dz, cols, acc_w);
  AccumulateColumnSums(m, vecs, dz, cols, acc_b);
}

// Rows [r0, r0 + m) back through every layer; dz0/dz1: [kBlockRows, max(W, out_pad)] scratch.
template <int W>
void BackwardBlock(const Shape& s, const BackwardPtrs& p, const Packed& pk, const GradLayout& g, float* acc,
                   int64_t r0, int64_t m, float* dz0, float* dz1) {
  constexpr int kVecs = W / kLanes;
  const int L = s.hidden_layers, out_pad = pk.out_pad;
  auto hidden = [&](int l) { return p.hidden + (l * s.n + r0) * W; };  // layer l's output rows
  // Output layer: dz = dy * f_out'(y), zero in the padding columns.
  for (int64_t i = 0; i < m; ++i) {
    const float* dy = p.grad_y + (r0 + i) * s.out;
    const float* y = p.y + (r0 + i) * s.out;
    for (int c = 0; c * kLanes < out_pad; ++c) {
      const int left = std::min(kLanes, s.out - c * kLanes);
      V d = simd::Zero();
      if (left > 0) {
        d = simd::Mul(simd::LoadN(dy + c * kLanes, left),
                      ActDerivative(simd::LoadN(y + c * kLanes, left), s.out_act, s.alpha));
      }
      simd::Store(dz0 + i * out_pad + c * kLanes, d);
    }
  }
  // The output layer's weight gradient transposed: dz^T h, out rows of W / kLanes vectors.
  AccumulateProduct(m, s.out, kVecs, dz0, out_pad, hidden(L - 1), W, acc + g.w[L]);
  AccumulateColumnSums(m, out_pad / kLanes, dz0, out_pad, acc + g.b[L]);
  // dh = dz W^T times f'(h) of the layer below.
  {
    const float* h = hidden(L - 1);
    Gemm(m, s.out, kVecs, dz0, out_pad, 1, pk.wt[L].data(), W, [](int64_t, int) { return simd::Zero(); },
         [&](int64_t i, int c, V v) {
           const int64_t o = i * W + c * kLanes;
           simd::Store(dz1 + o, simd::Mul(v, ActDerivative(simd::Load(h + o), s.act, s.alpha)));
         });
  }
  for (int l = L - 1; l >= 1; --l) {
    std::swap(dz0, dz1);  // dz0: this layer's dz [m, W]
    AccumulateWeightGrad(m, W, kVecs, hidden(l - 1), W, dz0, acc + g.w[l], acc + g.b[l]);
    const float* h = hidden(l - 1);
    Gemm(m, W, kVecs, dz0, W, 1, pk.wt[l].data(), W, [](int64_t, int) { return simd::Zero(); },
         [&](int64_t i, int c, V v) {
           const int64_t o = i * W + c * kLanes;
           simd::Store(dz1 + o, simd::Mul(v, ActDerivative(simd::Load(h + o), s.act, s.alpha)));
         });
  }
  // Input layer.
  const float* x = p.x + r0 * s.in;
  AccumulateWeightGrad(m, s.in, kVecs, x, s.in, dz1, acc + g.w[0], acc + g.b[0]);
  if (p.grad_x != nullptr) {
    float* dx = p.grad_x + r0 * s.in;
    Gemm(m, W, pk.in_pad / kLanes, dz1, W, 1, pk.wt[0].data(), pk.in_pad, [](int64_t, int) { return simd::Zero(); },
         [&](int64_t i, int c, V v) { StoreCols(dx + i * s.in, c, s.in, v); });
  }
}

// ---- entry points --------------------------------------------------------------------

// Calls f(std::integral_constant-like W) with the width as a compile-time value.
template <typename F>
void Dispatch(int width, F f) {
  switch (width) {
    case 16: return f(std::integral_constant<int, 16>());
    case 32: return f(std::integral_constant<int, 32>());
    case 64: return f(std::integral_constant<int, 64>());
    default: return f(std::integral_constant<int, 128>());
  }
}

// parallel_for(units, fn(begin, end)) runs fn over [0, units) on the threads,
// in shards taken as threads come free (a descheduled thread on a loaded
// machine then holds up one unit, not half the work); each unit is a few
// hundred microseconds of work.
constexpr int64_t kBlocksPerTask = 4;

template <typename ParallelFor>
void Forward(const Shape& s, const ForwardPtrs& p, ParallelFor parallel_for) {
  if (s.n == 0) return;
  Packed pk;
  PackForward(s, p.kernels, p.biases, &pk);
  const int64_t blocks = (s.n + kBlockRows - 1) / kBlockRows;
  const int64_t tasks = (blocks + kBlocksPerTask - 1) / kBlocksPerTask;
  Dispatch(s.width, [&](auto w) {
    parallel_for(tasks, [&](int64_t t0, int64_t t1) {
      std::vector<float> scratch(p.hidden != nullptr ? 0 : 2 * kBlockRows * decltype(w)::value);
      for (int64_t b = t0 * kBlocksPerTask; b < std::min(blocks, t1 * kBlocksPerTask); ++b) {
        const int64_t r0 = b * kBlockRows;
        ForwardBlock<decltype(w)::value>(s, p, pk, r0, std::min(kBlockRows, s.n - r0), scratch.data());
      }
    });
  });
}

template <typename ParallelFor>
void Backward(const Shape& s, const BackwardPtrs& p, ParallelFor parallel_for) {
  const int L = s.hidden_layers;
  Packed pk;
  PackBackward(s, p.kernels, &pk);
  const GradLayout g = MakeGradLayout(s, pk.out_pad);
  const int64_t blocks = (s.n + kBlockRows - 1) / kBlockRows;
  const int64_t parts = std::max<int64_t>(1, std::min(kMaxPartitions, blocks));
  std::vector<float> partial(parts * g.size, 0.0f);
  if (s.n > 0) {
    const int64_t scratch = kBlockRows * std::max<int64_t>(s.width, pk.out_pad);
    Dispatch(s.width, [&](auto w) {
      parallel_for(parts, [&](int64_t p0, int64_t p1) {
        std::vector<float> dz(2 * scratch);
        for (int64_t q = p0; q < p1; ++q) {
          for (int64_t b = blocks * q / parts; b < blocks * (q + 1) / parts; ++b) {
            const int64_t r0 = b * kBlockRows;
            BackwardBlock<decltype(w)::value>(s, p, pk, g, partial.data() + q * g.size, r0,
                                              std::min(kBlockRows, s.n - r0), dz.data(), dz.data() + scratch);
          }
        }
      });
    });
  }
  // Partitions added in order (partition 0 first, for every element): the
  // same sums whatever the thread count.
  for (int64_t q = 1; q < parts; ++q) {
    float* sum = partial.data();
    const float* part = partial.data() + q * g.size;
    for (int64_t i = 0; i < g.size; ++i) sum[i] += part[i];
  }
  // Out of the partials into the wanted outputs.
  for (int l = 0; l <= L; ++l) {
    const int64_t rows = l == 0 ? s.in : s.width, cols = l == L ? s.out : s.width;
    for (int64_t r = 0; p.grad_kernels[l] != nullptr && r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        // The output layer's is transposed.
        p.grad_kernels[l][r * cols + c] = partial[g.w[l] + (l == L ? c * rows + r : r * cols + c)];
      }
    }
    if (p.grad_biases[l] != nullptr) std::copy(partial.begin() + g.b[l], partial.begin() + g.b[l] + cols, p.grad_biases[l]);
  }
}

}  // namespace fused_mlp_cpu
}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_CPU_H_
