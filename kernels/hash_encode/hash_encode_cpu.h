// TF-independent bodies of the CPU hash-encoding kernels (scheduling only; the
// arithmetic is kernels/common/hash_grid.h). Included by
// kernels/hash_encode/hash_encode_kernels.cc; kept free of TensorFlow headers so the
// loops can be compiled and inspected on their own.
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_CPU_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_CPU_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#if defined(__FMA__)
#include "kernels/framework/x86_intrinsics.h"
#endif

#include "kernels/common/hash_grid.h"

namespace mo {
namespace hash_encode_cpu {

using ::mo::int64;
using ::mo::uint32;

// ---- Level geometry -------------------------------------------------------------------

struct Level {
  int64 offset;  // first row of the level
  uint32 entries;
  uint32 resolution;
  float scale;
  bool hashed;
};

struct Grid {
  int num_levels;
  int interpolation;
  int out_of_range;
  Level levels[hash_grid::kMaxLevels];
};

// The levels of p, the per-level table every backend uses (hash_grid::make_params).
inline Grid MakeGrid(const hash_grid::Params& p) {
  Grid g;
  g.num_levels = p.num_levels;
  g.interpolation = p.interpolation;
  g.out_of_range = p.out_of_range;
  for (int l = 0; l < p.num_levels; ++l) {
    const hash_grid::LevelGeometry t = hash_grid::params_level(p, l);
    Level& lv = g.levels[l];
    lv.offset = p.level_offsets[l];
    lv.entries = t.entries;
    lv.scale = t.scale;
    lv.resolution = t.resolution;
    lv.hashed = t.hashed;
  }
  return g;
}

// value where mask != 0, else 0 (not value * mask: keeps NaN/inf out of
// masked entries). The value is always loaded through a volatile: with g++ 12
// -O3 -march=native the plain `mask != 0 ? gg[i] : 0` loops of this file
// produced garbage in some lanes (reproduced in the TF build, correct at -O0
// and with -fno-tree-vectorize; not reproduced standalone, not root-caused).
inline float MaskedValue(float value, float mask) {
  volatile float loaded = value;
  return mask != 0.0f ? float(loaded) : 0.0f;
}

constexpr int kBlock = 64;  // points per block: a block's output rows stay in L1/L2
// Levels whose rows take more bytes than this are prefetched block by block.
constexpr int64 kPrefetchMinBytes = 256 * 1024;

// Out-of-range rule for a block of points: used coordinates, gradient masks
// and whether each point contributes at all.
template <int D>
void PrepareBlock(const float* x, int nb, int out_of_range, float (*xs)[D], float (*mask)[D], bool* ok) {
  for (int j = 0; j < nb; ++j) {
    bool keep = true;
    for (int d = 0; d < D; ++d) {
      keep &= hash_grid::prepare_coordinate(x[int64(j) * D + d], out_of_range, &xs[j][d], &mask[j][d]);
    }
    ok[j] = keep;
    if (!keep) {
      for (int d = 0; d < D; ++d) xs[j][d] = 0.0f;  // never used
    }
  }
}

// Corner coefficients of the second-order pass (adjoint of the input gradient).
template <int D>
inline void SecondOrderCoefficients(const float* w, const float* dw, float scale, const float* g, float* coef) {
  for (uint32 idx = 0; idx < (1u << D); ++idx)
    coef[idx] = hash_grid::input_gradient_coefficient<D>(idx, w, dw, scale, g);
}

template <int D>
inline void MaskSecondOrder(const float* gg, int64 b0, int nb, const float (*mask)[D], float (*gm)[D]) {
  for (int j = 0; j < nb; ++j)
    for (int d = 0; d < D; ++d) gm[j][d] = MaskedValue(gg[(b0 + j) * D + d], mask[j][d]);
}

// Points are processed in chunks of kChunk, level by level inside a chunk, in
// blocks of kBlock inside a level: one level's rows (a few MB at most) are the
// only table memory touched for a while, which keeps TLB and cache misses
// down, and a chunk's output / incoming-gradient rows stay in L2.
constexpr int kChunk = 2048;

template <int D>
struct ChunkPoints {
  float xs[kChunk][D];
  float mask[kChunk][D];
  float gm[kChunk][D];
  bool ok[kChunk];
  alignas(64) float coord[D][kChunk];  // xs transposed: the per-level cell search vectorises over points
  void Prepare(const float* x, const float* gg, bool second_order, int64 c0, int nc, int out_of_range) {
    PrepareBlock<D>(x + c0 * D, nc, out_of_range, xs, mask, ok);
    for (int j = 0; j < nc; ++j)
      for (int d = 0; d < D; ++d) coord[d][j] = xs[j][d];
    if (second_order) MaskSecondOrder<D>(gg, c0, nc, mask, gm);
  }
};

// Corners of every point of a block at one level, computed in a first pass
// that also prefetches their table rows; the gathers / scatters of the second
// pass then find them in cache instead of waiting on one miss at a time.
template <int D>
struct BlockCorners {
  static constexpr int C = 1 << D;
  alignas(64) uint32 rows[C][kBlock];
  alignas(64) float weights[C][kBlock];
  alignas(64) float w[D][kBlock];
  alignas(64) float dw[D][kBlock];
  alignas(64) uint32 cell[D][kBlock];

  // Point j's corners / per-dim weights as the small arrays hash_grid.h takes.
  void Corners(int j, uint32* r, float* wt) const {
    for (int c = 0; c < C; ++c) {
      r[c] = rows[c][j];
      wt[c] = weights[c][j];
    }
  }
  void Weights(int j, float* wj, float* dwj) const {
    for (int d = 0; d < D; ++d) {
      wj[d] = w[d][j];
      dwj[d] = dw[d][j];
    }
  }
};

// Structure-of-arrays passes over the block's points: the compiler vectorises
// the cell / weight / hash arithmetic across points. Values are those of
// hash_grid.h's cell_corners (same functions, same order).
template <int D, bool kHashed, int kInterpolation>
inline void LocateBlockImpl(const ChunkPoints<D>& cp, int j0, int nb, const Level& lv, BlockCorners<D>* bc) {
  constexpr int C = 1 << D;
  const float scale = lv.scale;
  for (int d = 0; d < D; ++d) {
    const float* coord = cp.coord[d] + j0;
    uint32* cell = bc->cell[d];
    float* w = bc->w[d];
    float* dw = bc->dw[d];
    for (int j = 0; j < nb; ++j) hash_grid::locate(coord[j], scale, kInterpolation, &cell[j], &w[j], &dw[j]);
  }
  // Corner by corner over the block's points (vectorised across points). The
  // final % entries of cell_corners (hash_grid::wrap_row): hashed levels have 2^k
  // rows (a mask); dense rows are below `entries` unless a point sits on the
  // upper face or wraps, which the rare scalar pass handles.
  uint32 factor[D];
  hash_grid::corner_factors<D>(lv.resolution, kHashed, factor);
  const uint32 entries = lv.entries;
  uint32 beyond = 0;
  for (int c = 0; c < C; ++c) {
    uint32* rows = bc->rows[c];
    float* weights = bc->weights[c];
    for (int j = 0; j < nb; ++j) {
      uint32 cell[D];
      float w[D];
      for (int d = 0; d < D; ++d) {
        cell[d] = bc->cell[d][j];
        w[d] = bc->w[d][j];
      }
      uint32 row;
      hash_grid::corner_unwrapped<D>(c, cell, w, factor, kHashed, &row, &weights[j]);
      if (kHashed) {
        row &= entries - 1u;  // hashed levels have 2^log2_hashmap_size rows
      } else {
        beyond |= uint32(row >= entries);
      }
      rows[j] = row;
    }
  }
  if (!kHashed && beyond) {
    for (int c = 0; c < C; ++c)
      for (int j = 0; j < nb; ++j) bc->rows[c][j] = hash_grid::wrap_row(bc->rows[c][j], entries);
  }
}

// Corners of points j0 .. j0 + nb - 1 of a chunk at one level; with
// second_order, the weights become the corner coefficients of the adjoint of
// the input gradient. The level's hashed flag and the interpolation become
// compile-time constants of the inlined header functions (no per-corner
// selects). Not inlined: one copy per D serves every feature count, dtype and
// pass (instantiating the vectorised loops per caller multiplied the build
// time of kernels/hash_encode/hash_encode_kernels.cc, not the speed).
template <int D>
__attribute__((noinline)) void LocateBlock(const ChunkPoints<D>& cp, int j0, int nb, const Level& lv,
                                           int interpolation, bool second_order, BlockCorners<D>* bc) {
  constexpr int C = 1 << D;
  if (lv.hashed) {
    if (interpolation == hash_grid::kSmoothstep) {
      LocateBlockImpl<D, true, hash_grid::kSmoothstep>(cp, j0, nb, lv, bc);
    } else {
      LocateBlockImpl<D, true, hash_grid::kLinear>(cp, j0, nb, lv, bc);
    }
  } else {
    if (interpolation == hash_grid::kSmoothstep) {
      LocateBlockImpl<D, false, hash_grid::kSmoothstep>(cp, j0, nb, lv, bc);
    } else {
      LocateBlockImpl<D, false, hash_grid::kLinear>(cp, j0, nb, lv, bc);
    }
  }
  if (second_order) {
    for (int j = 0; j < nb; ++j) {
      float w[D], dw[D], coef[C];
      bc->Weights(j, w, dw);
      SecondOrderCoefficients<D>(w, dw, lv.scale, cp.gm[j0 + j], coef);
      for (int c = 0; c < C; ++c) bc->weights[c][j] = coef[c];
    }
  }
}

// Prefetches the rows a block will gather / scatter, for levels too large for
// L2: one prefetch per x-pair of corners (idx, idx + 1 are x-neighbours, prime
// 1 / stride 1 along x, so in the same 64-byte line 7 times in 8). Rows of
// skipped points are valid too.
template <int D, int F, bool kForWrite, typename T>
inline void PrefetchBlock(const BlockCorners<D>& bc, int nb, const Level& lv, const T* level_rows) {
  if (int64(lv.entries) * F * int64(sizeof(T)) <= kPrefetchMinBytes) return;
  for (int c = 0; c < (1 << D); c += 2) {
    const uint32* rows = bc.rows[c];
    for (int j = 0; j < nb; ++j) __builtin_prefetch(level_rows + int64(rows[j]) * F, kForWrite ? 1 : 0, 3);
  }
}

// Calls visit(level, j0, nb, corners) for every block of a chunk's nc points
// at levels first, first + step, ... < num_levels, in that order. The next
// block is located (and its table lines prefetched) before the current one is
// visited, so its misses are in flight while the current block gathers or
// scatters. `rows` is the table or gradient buffer the prefetches target.
template <int D, int F, bool kSecondOrder, bool kForWrite, typename T, typename Visit>
void ForEachBlock(const ChunkPoints<D>& cp, int nc, const Grid& g, int first, int step, const T* rows,
                  Visit&& visit) {
  const int L = g.num_levels;
  if (nc <= 0 || first >= L) return;
  BlockCorners<D> bc[2];
  auto locate = [&](int l, int j0, BlockCorners<D>* out) {
    const Level& lv = g.levels[l];
    const int nb = std::min(kBlock, nc - j0);
    LocateBlock<D>(cp, j0, nb, lv, g.interpolation, kSecondOrder, out);
    PrefetchBlock<D, F, kForWrite>(*out, nb, lv, rows + lv.offset * F);
  };
  int l = first, j0 = 0, k = 0;
  locate(l, j0, &bc[0]);
  while (l < L) {
    int next_l = l, next_j0 = j0 + kBlock;
    if (next_j0 >= nc) {
      next_j0 = 0;
      next_l += step;
    }
    if (next_l < L) locate(next_l, next_j0, &bc[k ^ 1]);
    visit(l, j0, std::min(kBlock, nc - j0), static_cast<const BlockCorners<D>&>(bc[k]));
    l = next_l;
    j0 = next_j0;
    k ^= 1;
  }
}

// Forward: out[i, l*F + f] = sum_corners weight * table[row, f].
// kSecondOrder: the weights are the corner coefficients of dLoss/dgrad_inputs
// (gg, [N, D]), which gives dLoss/dgrad_encoded.
template <int D, int F, typename T, bool kSecondOrder>
void GatherRange(const float* x, const float* gg, const T* table, T* out, int64 begin, int64 end, const Grid& g) {
  const int L = g.num_levels;
  const int64 width = int64(L) * F;
  std::unique_ptr<ChunkPoints<D>> cp(new ChunkPoints<D>);
  for (int64 c0 = begin; c0 < end; c0 += kChunk) {
    const int nc = int(std::min<int64>(kChunk, end - c0));
    cp->Prepare(x, gg, kSecondOrder, c0, nc, g.out_of_range);
    ForEachBlock<D, F, kSecondOrder, false>(*cp, nc, g, 0, 1, table, [&](int l, int j0, int nb,
                                                                         const BlockCorners<D>& bc) {
      const T* level_table = table + g.levels[l].offset * F;
      const bool* ok = cp->ok + j0;
      T* o = out + (c0 + j0) * width + int64(l) * F;
      for (int j = 0; j < nb; ++j, o += width) {
        float acc[F];
        if (ok[j]) {
          uint32 rows[1 << D];
          float weights[1 << D];
          bc.Corners(j, rows, weights);
          hash_grid::interpolate_corners<D, F, T>(level_table, rows, weights, acc);
        } else {
          for (int f = 0; f < F; ++f) acc[f] = 0.0f;
        }
        for (int f = 0; f < F; ++f) o[f] = static_cast<T>(acc[f]);
      }
    });
  }
}

// row[f] = fma(weight, dy[f], row[f]) for f < F. With FMA, F = 2 and F = 4
// rows are one 8- / 16-byte read-modify-write (same per-lane fma, same bits):
// the scatter is bound by these random-row updates.
template <int F>
inline void AccumulateRow(float* row, float weight, const float* dy) {
#if defined(__FMA__)
  if (F == 2) {
    // memcpy: 8-byte loads / stores without strict-aliasing hazards.
    double r, d;
    std::memcpy(&r, row, sizeof(r));
    std::memcpy(&d, dy, sizeof(d));
    const __m128 sum = _mm_fmadd_ps(_mm_set1_ps(weight), _mm_castpd_ps(_mm_set_sd(d)), _mm_castpd_ps(_mm_set_sd(r)));
    r = _mm_cvtsd_f64(_mm_castps_pd(sum));
    std::memcpy(row, &r, sizeof(r));
    return;
  }
  if (F == 4) {
    _mm_storeu_ps(row, _mm_fmadd_ps(_mm_set1_ps(weight), _mm_loadu_ps(dy), _mm_loadu_ps(row)));
    return;
  }
#endif
  for (int f = 0; f < F; ++f) row[f] = ::mo::fma_f(weight, dy[f], row[f]);
}

// Calls fn(j, dyf) for each point j < nb of a block that contributes
// (ok[j]), dyf its incoming gradient at the level as float32; dy_level is the
// block's first point's row at that level, rows `width` apart.
template <int F, typename T, typename Fn>
inline void ForEachContributingPoint(int nb, const bool* ok, const T* dy_level, int64 width, Fn&& fn) {
  for (int j = 0; j < nb; ++j, dy_level += width) {
    if (!ok[j]) continue;
    float dyf[F];
    for (int f = 0; f < F; ++f) dyf[f] = float(dy_level[f]);
    fn(j, static_cast<const float*>(dyf));
  }
}

// Table gradient of the levels owned by `group` (l % groups == group), into
// the float32 buffer `acc` ([P, F]); points in index order within a level.
template <int D, int F, typename T, bool kSecondOrder>
void ScatterGroup(int group, int groups, const float* x, const float* gg, const T* dy, float* acc, int64 n,
                  const Grid& g) {
  constexpr int C = 1 << D;
  const int L = g.num_levels;
  const int64 width = int64(L) * F;
  for (int l = group; l < L; l += groups) {
    std::memset(acc + g.levels[l].offset * F, 0, sizeof(float) * F * size_t(g.levels[l].entries));
  }
  std::unique_ptr<ChunkPoints<D>> cp(new ChunkPoints<D>);
  for (int64 c0 = 0; c0 < n; c0 += kChunk) {
    const int nc = int(std::min<int64>(kChunk, n - c0));
    cp->Prepare(x, gg, kSecondOrder, c0, nc, g.out_of_range);
    ForEachBlock<D, F, kSecondOrder, true>(*cp, nc, g, group, groups, acc, [&](int l, int j0, int nb,
                                                                               const BlockCorners<D>& bc) {
      float* level_acc = acc + g.levels[l].offset * F;
      const bool* ok = cp->ok + j0;
      const T* dyl = dy + (c0 + j0) * width + int64(l) * F;
      ForEachContributingPoint<F>(nb, ok, dyl, width, [&](int j, const float* dyf) {
        for (int c = 0; c < C; ++c) AccumulateRow<F>(level_acc + int64(bc.rows[c][j]) * F, bc.weights[c][j], dyf);
      });
    });
  }
}

// dLoss/dinputs for points begin..end: levels in order 0..L-1, masked.
template <int D, int F, typename T>
void InputGradRange(const float* x, const T* table, const T* dy, float* dx, int64 begin, int64 end,
                    const Grid& g) {
  const int L = g.num_levels;
  const int64 width = int64(L) * F;
  std::unique_ptr<ChunkPoints<D>> cp(new ChunkPoints<D>);
  float (*sum)[D] = cp->gm;  // the chunk's running dL/dx
  for (int64 c0 = begin; c0 < end; c0 += kChunk) {
    const int nc = int(std::min<int64>(kChunk, end - c0));
    cp->Prepare(x, nullptr, false, c0, nc, g.out_of_range);
    for (int j = 0; j < nc; ++j)
      for (int d = 0; d < D; ++d) sum[j][d] = 0.0f;
    ForEachBlock<D, F, false, false>(*cp, nc, g, 0, 1, table, [&](int l, int j0, int nb,
                                                                  const BlockCorners<D>& bc) {
      const Level& lv = g.levels[l];
      const T* level_table = table + lv.offset * F;
      const bool* ok = cp->ok + j0;
      const T* dyl = dy + (c0 + j0) * width + int64(l) * F;
      ForEachContributingPoint<F>(nb, ok, dyl, width, [&](int j, const float* dyf) {
        uint32 rows[1 << D];
        float weights[1 << D], w[D], dw[D];
        bc.Corners(j, rows, weights);
        bc.Weights(j, w, dw);
        hash_grid::accumulate_input_gradient_corners<D, F, T>(level_table, rows, lv.scale, w, dw, dyf, sum[j0 + j]);
      });
    });
    for (int j = 0; j < nc; ++j)
      for (int d = 0; d < D; ++d) dx[(c0 + j) * D + d] = MaskedValue(sum[j][d], cp->ok[j] ? cp->mask[j][d] : 0.0f);
  }
}

}  // namespace hash_encode_cpu
}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_CPU_H_
