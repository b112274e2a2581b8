// TF-independent bodies of the CPU hash-encoding kernels (scheduling only; the
// arithmetic is kernels/common/hash_grid.h). Included by
// kernels/cpu/hash_encode_kernels.cc; kept free of TensorFlow headers so the
// loops can be compiled and inspected on their own.
#ifndef METAL_OPS_KERNELS_CPU_HASH_ENCODE_CPU_H_
#define METAL_OPS_KERNELS_CPU_HASH_ENCODE_CPU_H_

#include <algorithm>
#include <cstring>

#include "kernels/common/hash_grid.h"

namespace metal_ops {
namespace hash_encode_cpu {

namespace hg = ::mo::hash_grid;
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
  Level levels[hg::kMaxLevels];
};

// value where mask != 0, else 0 (not value * mask: keeps NaN/inf out of
// masked entries). The value is always loaded: g++ 12 -O3 -march=native
// miscompiled the equivalent `mask != 0 ? load : 0` (AVX-512 masked loads)
// into garbage for some lanes in this file.
inline float MaskedValue(float value, float mask) {
  volatile float loaded = value;
  return mask != 0.0f ? float(loaded) : 0.0f;
}

constexpr int kBlock = 64;  // points per block: a block's output rows stay in L1/L2

// Out-of-range rule for a block of points: used coordinates, gradient masks
// and whether each point contributes at all.
template <int D>
void PrepareBlock(const float* x, int nb, int out_of_range, float (*xs)[D], float (*mask)[D], bool* ok) {
  for (int j = 0; j < nb; ++j) {
    bool keep = true;
    for (int d = 0; d < D; ++d) {
      keep &= hg::prepare_coordinate(x[int64(j) * D + d], out_of_range, &xs[j][d], &mask[j][d]);
    }
    ok[j] = keep;
  }
}

template <int D>
inline void LocatePoint(const float* xs, const Level& lv, int interpolation, uint32* cell, float* w,
                        float* dw) {
  for (int d = 0; d < D; ++d) hg::locate(xs[d], lv.scale, interpolation, &cell[d], &w[d], &dw[d]);
}

// Corner coefficients of the second-order pass (adjoint of the input gradient).
template <int D>
inline void SecondOrderCoefficients(const float* w, const float* dw, float scale, const float* g, float* coef) {
  for (uint32 idx = 0; idx < (1u << D); ++idx) coef[idx] = hg::input_gradient_coefficient<D>(idx, w, dw, scale, g);
}

// Forward: out[i, l*F + f] = sum_corners weight * table[row, f].
// kSecondOrder: the weights are the corner coefficients of dLoss/dgrad_inputs
// (gg, [N, D]), which gives dLoss/dgrad_encoded.
template <int D, int F, typename T, bool kSecondOrder>
void GatherRange(const float* x, const float* gg, const T* table, T* out, int64 begin, int64 end, const Grid& g) {
  constexpr int C = 1 << D;
  const int L = g.num_levels;
  const int64 width = int64(L) * F;
  float xs[kBlock][D], mask[kBlock][D], gm[kBlock][D];
  bool ok[kBlock];
  for (int64 b0 = begin; b0 < end; b0 += kBlock) {
    const int nb = int(std::min<int64>(kBlock, end - b0));
    PrepareBlock<D>(x + b0 * D, nb, g.out_of_range, xs, mask, ok);
    if (kSecondOrder) {
      for (int j = 0; j < nb; ++j)
        for (int d = 0; d < D; ++d) gm[j][d] = MaskedValue(gg[(b0 + j) * D + d], mask[j][d]);
    }
    for (int l = 0; l < L; ++l) {
      const Level& lv = g.levels[l];
      const T* level_table = table + lv.offset * F;
      T* o = out + b0 * width + int64(l) * F;
      for (int j = 0; j < nb; ++j, o += width) {
        float acc[F];
        if (ok[j]) {
          uint32 cell[D], rows[C];
          float w[D], dw[D], weights[C];
          LocatePoint<D>(xs[j], lv, g.interpolation, cell, w, dw);
          hg::cell_corners<D>(cell, w, lv.resolution, lv.entries, lv.hashed, rows, weights);
          if (kSecondOrder) SecondOrderCoefficients<D>(w, dw, lv.scale, gm[j], weights);
          hg::interpolate_corners<D, F, T>(level_table, rows, weights, acc);
        } else {
          for (int f = 0; f < F; ++f) acc[f] = 0.0f;
        }
        for (int f = 0; f < F; ++f) o[f] = static_cast<T>(acc[f]);
      }
    }
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
  float xs[kBlock][D], mask[kBlock][D], gm[kBlock][D];
  bool ok[kBlock];
  for (int64 b0 = 0; b0 < n; b0 += kBlock) {
    const int nb = int(std::min<int64>(kBlock, n - b0));
    PrepareBlock<D>(x + b0 * D, nb, g.out_of_range, xs, mask, ok);
    if (kSecondOrder) {
      for (int j = 0; j < nb; ++j)
        for (int d = 0; d < D; ++d) gm[j][d] = MaskedValue(gg[(b0 + j) * D + d], mask[j][d]);
    }
    for (int l = group; l < L; l += groups) {
      const Level& lv = g.levels[l];
      float* level_acc = acc + lv.offset * F;
      const T* dyl = dy + b0 * width + int64(l) * F;
      for (int j = 0; j < nb; ++j, dyl += width) {
        if (!ok[j]) continue;
        float dyf[F];
        for (int f = 0; f < F; ++f) dyf[f] = float(dyl[f]);
        uint32 cell[D], rows[C];
        float w[D], dw[D], weights[C];
        LocatePoint<D>(xs[j], lv, g.interpolation, cell, w, dw);
        hg::cell_corners<D>(cell, w, lv.resolution, lv.entries, lv.hashed, rows, weights);
        if (kSecondOrder) SecondOrderCoefficients<D>(w, dw, lv.scale, gm[j], weights);
        for (int c = 0; c < C; ++c) {
          float* r = level_acc + int64(rows[c]) * F;
          for (int f = 0; f < F; ++f) r[f] = ::mo::fma_f(weights[c], dyf[f], r[f]);
        }
      }
    }
  }
}

// dLoss/dinputs for points begin..end: levels in order 0..L-1, masked.
template <int D, int F, typename T>
void InputGradRange(const float* x, const T* table, const T* dy, float* dx, int64 begin, int64 end,
                    const Grid& g) {
  constexpr int C = 1 << D;
  const int L = g.num_levels;
  const int64 width = int64(L) * F;
  float xs[kBlock][D], mask[kBlock][D], sum[kBlock][D];
  bool ok[kBlock];
  for (int64 b0 = begin; b0 < end; b0 += kBlock) {
    const int nb = int(std::min<int64>(kBlock, end - b0));
    PrepareBlock<D>(x + b0 * D, nb, g.out_of_range, xs, mask, ok);
    for (int j = 0; j < nb; ++j)
      for (int d = 0; d < D; ++d) sum[j][d] = 0.0f;
    for (int l = 0; l < L; ++l) {
      const Level& lv = g.levels[l];
      const T* level_table = table + lv.offset * F;
      const T* dyl = dy + b0 * width + int64(l) * F;
      for (int j = 0; j < nb; ++j, dyl += width) {
        if (!ok[j]) continue;
        float dyf[F];
        for (int f = 0; f < F; ++f) dyf[f] = float(dyl[f]);
        uint32 cell[D], rows[C];
        float w[D], dw[D], weights[C];
        LocatePoint<D>(xs[j], lv, g.interpolation, cell, w, dw);
        hg::cell_corners<D>(cell, w, lv.resolution, lv.entries, lv.hashed, rows, weights);
        hg::accumulate_input_gradient_corners<D, F, T>(level_table, rows, lv.scale, w, dw, dyf, sum[j]);
      }
    }
    for (int j = 0; j < nb; ++j)
      for (int d = 0; d < D; ++d) dx[(b0 + j) * D + d] = MaskedValue(sum[j][d], ok[j] ? mask[j][d] : 0.0f);
  }
}

}  // namespace hash_encode_cpu
}  // namespace metal_ops

#endif  // METAL_OPS_KERNELS_CPU_HASH_ENCODE_CPU_H_
