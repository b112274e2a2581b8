// Multiresolution hash encoding (instant-NGP), the formulas once.
//
// Bit-compatible with tiny-cuda-nn's "Hash" grid (encodings/grid.h) for
// in-range inputs and float32 tables: same level scale and resolution, +0.5
// stagger, dense-vs-hashed rule, primes, row layout and the order of the
// fused multiply-adds that interpolate a level. Compiled as C++ (CPU kernels,
// MSL shim), CUDA and Metal Shading Language; see platform.h.
//
// Layout: the table is [P, F]; level l owns rows offset[l] .. offset[l+1]-1
// (level_entries() rows), F features of a row adjacent. Output of a point is
// [L * F]: level l's features at columns l*F .. l*F+F-1.
#ifndef MO_KERNELS_COMMON_HASH_GRID_H_
#define MO_KERNELS_COMMON_HASH_GRID_H_

#include "kernels/common/platform.h"

namespace mo {
namespace hash_grid {

enum Interpolation { kLinear = 0, kSmoothstep = 1 };

// What happens to a point outside [0,1]^D:
//   kClamp: each coordinate is clamped to [0,1] (zero input gradient where clamped);
//   kWrap:  tiny-cuda-nn's behaviour, no clamp (cells wrap through uint32);
//   kZero:  the point's features and all its gradients are zero.
// In every mode a NaN or infinite coordinate zeroes the point (features and
// gradients), so bad inputs never index the table from garbage.
enum OutOfRange { kClamp = 0, kWrap = 1, kZero = 2 };

enum Limits {
  kMaxDims = 4,
  kMaxLevels = 32,
  kMinLog2HashmapSize = 1,
  kMaxLog2HashmapSize = 30,
};

// Arguments of one encoding, as passed to CUDA and Metal kernels (same layout
// on host and device: only 4- and 8-byte scalars, 8-byte fields first). The
// per-level geometry is computed once on the host (make_params) and read by
// every backend's kernels: a GPU's exp2 is not correctly rounded, and one ulp
// can move ceil(scale) (base 16, scale 1.5: levels 1-4 are within 2e-7 of an
// integer), so a kernel that computed it per element could index other rows
// than the CPU.
struct Params {
  int64 num_points;
  int64 level_offsets[kMaxLevels + 1];  // row offsets, level_offsets[L] = P
  float level_scale[kMaxLevels];        // vertex coordinate = scale * x + 0.5
  uint32 level_resolution[kMaxLevels];  // vertices per axis
  uint32 level_hashed[kMaxLevels];      // 1: hashed vertices, 0: dense
  int32 num_levels;
  int32 interpolation;
  int32 out_of_range;
  int32 pad_;  // keeps sizeof a multiple of 8 everywhere
};

// tiny-cuda-nn's coherent prime hash factors; dim 0 uses 1 so neighbours
// along x stay adjacent in memory.
MO_FN uint32 prime(int dim) {
  switch (dim) {
    case 0: return 1u;
    case 1: return 2654435761u;
    case 2: return 805459861u;
    default: return 3674653429u;
  }
}

// Scale of level l: base_resolution counts grid vertices, hence the -1.
// Host code only (level_geometry); kernels read Params::level_scale.
MO_FN float level_scale(int level, float log2_per_level_scale, uint32 base_resolution) {
  return exp2_f(float(level) * log2_per_level_scale) * float(base_resolution) - 1.0f;
}

MO_FN uint32 level_resolution(float scale) { return uint32(ceil_f(scale)) + 1u; }

// Rows of one level: resolution^D (saturating at 2^31 - 1 as tiny-cuda-nn
// does), rounded up to a multiple of 8, capped at 2^log2_hashmap_size.
MO_FN uint32 level_entries(int dims, uint32 resolution, int log2_hashmap_size) {
  const uint64 max_params = uint64(0x7fffffffu);
  uint64 dense = 1;
  for (int d = 0; d < dims; ++d) {
    dense *= uint64(resolution);
    if (dense > max_params) dense = max_params;
  }
  uint64 entries = (dense + uint64(7u)) & ~uint64(7u);
  const uint64 hashed = uint64(1u) << uint32(log2_hashmap_size);
  if (entries > hashed) entries = hashed;
  return uint32(entries);
}

// Whether a level is hashed: resolution^dims > entries.
MO_FN bool level_is_hashed(int dims, uint32 resolution, uint32 entries) {
  uint64 stride = 1;
  for (int d = 0; d < dims; ++d) {
    stride *= uint64(resolution);
    if (stride > uint64(entries)) return true;
  }
  return false;
}

// One level's geometry. The one function that computes it, for every backend:
// the CPU, CUDA and Metal hosts call it through make_params / level_offsets
// and hand the kernels the table.
struct LevelGeometry {
  float scale;
  uint32 resolution;
  uint32 entries;
  bool hashed;
};

MO_FN LevelGeometry level_geometry(int dims, int level, int log2_hashmap_size, float log2_per_level_scale,
                                   uint32 base_resolution) {
  LevelGeometry g;
  g.scale = level_scale(level, log2_per_level_scale, base_resolution);
  g.resolution = level_resolution(g.scale);
  g.entries = level_entries(dims, g.resolution, log2_hashmap_size);
  g.hashed = level_is_hashed(dims, g.resolution, g.entries);
  return g;
}

// Row offsets of every level: offsets[0] = 0, offsets[l+1] = offsets[l] +
// level_entries(l). Returns the total row count P (64-bit: it can pass 2^32).
MO_FN int64 level_offsets(int dims, int num_levels, int log2_hashmap_size,
                          float log2_per_level_scale, uint32 base_resolution,
                          MO_THREAD int64* offsets) {
  offsets[0] = 0;
  for (int l = 0; l < num_levels; ++l) {
    const LevelGeometry g = level_geometry(dims, l, log2_hashmap_size, log2_per_level_scale, base_resolution);
    offsets[l + 1] = offsets[l] + int64(g.entries);
  }
  return offsets[num_levels];
}

// The one place a grid's Params is filled (CPU, CUDA and Metal hosts, the
// MSL-shim tests). log2_per_level_scale is log2_f(per_level_scale) in float32,
// as in tiny-cuda-nn. Returns the table's row count P.
MO_FN int64 make_params(int dims, int64 num_points, int num_levels, int log2_hashmap_size, uint32 base_resolution,
                        float per_level_scale, int interpolation, int out_of_range, MO_THREAD Params* p) {
  const float log2_per_level_scale = log2_f(per_level_scale);
  p->num_points = num_points;
  p->num_levels = num_levels;
  p->interpolation = interpolation;
  p->out_of_range = out_of_range;
  p->pad_ = 0;
  p->level_offsets[0] = 0;
  for (int l = 0; l < kMaxLevels; ++l) {
    const bool used = l < num_levels;
    LevelGeometry g = {0.0f, 0u, 0u, false};
    if (used) g = level_geometry(dims, l, log2_hashmap_size, log2_per_level_scale, base_resolution);
    p->level_scale[l] = g.scale;
    p->level_resolution[l] = g.resolution;
    p->level_hashed[l] = g.hashed ? 1u : 0u;
    p->level_offsets[l + 1] = used ? p->level_offsets[l] + int64(g.entries) : 0;
  }
  return p->level_offsets[num_levels];
}

// Level l of p, as the kernels use it.
MO_FN LevelGeometry params_level(MO_CONSTANT Params& p, int level) {
  LevelGeometry g;
  g.scale = p.level_scale[level];
  g.resolution = p.level_resolution[level];
  g.entries = uint32(p.level_offsets[level + 1] - p.level_offsets[level]);
  g.hashed = p.level_hashed[level] != 0u;
  return g;
}

// Applies the out-of-range rule to one coordinate. Returns false when the
// whole point must be zeroed; *grad_mask is d(coordinate used)/d(input).
MO_FN bool prepare_coordinate(float x, int out_of_range, MO_THREAD float* x_used,
                              MO_THREAD float* grad_mask) {
  *x_used = x;
  *grad_mask = 1.0f;
  if (isnan_f(x) || isinf_f(x)) return false;
  if (x < 0.0f || x > 1.0f) {
    if (out_of_range == kZero) return false;
    if (out_of_range == kClamp) {
      *x_used = x < 0.0f ? 0.0f : 1.0f;
      *grad_mask = 0.0f;
    }
  }
  return true;
}

// Cell and interpolation weight of coordinate x at a level of the given scale.
// w is the weight of the upper vertex; dw = dw/dfrac.
MO_FN void locate(float x, float scale, int interpolation, MO_THREAD uint32* cell,
                  MO_THREAD float* w, MO_THREAD float* dw) {
  float pos = fma_f(scale, x, 0.5f);
  const float lower = floor_f(pos);
  // tiny-cuda-nn: (uint32)(int)lower. Going through int64 keeps wrap-mode
  // inputs beyond 2^31 defined. A float at or above 2^55 is a multiple of 2^32,
  // so its cell wraps to exactly 0; that also covers pos = +-inf when scale * x
  // overflows (frac 0 instead of inf - inf = NaN), and no cast leaves int64.
  const bool in_int64_range = fabs_f(lower) < 4.0e18f;
  *cell = in_int64_range ? uint32(int64(lower)) : 0u;
  pos = in_int64_range ? pos - lower : 0.0f;
  if (interpolation == kSmoothstep) {
    *w = pos * pos * (3.0f - 2.0f * pos);
    *dw = 6.0f * pos * (1.0f - pos);
  } else {
    *w = pos;
    *dw = 1.0f;
  }
}

// d(weight of corner idx)/d(frac_d) for every d, given w and dw.
template <int D>
MO_FN void corner_weight_gradient(uint32 idx, const MO_THREAD float* w, const MO_THREAD float* dw,
                                  MO_THREAD float* dweight) {
  for (int d = 0; d < D; ++d) {
    float g = (idx & (1u << d)) ? dw[d] : -dw[d];
    for (int k = 0; k < D; ++k) {
      if (k == d) continue;
      g *= (idx & (1u << k)) ? w[k] : 1.0f - w[k];
    }
    dweight[d] = g;
  }
}

// ---- Whole-cell helpers ------------------------------------------------------
// A cell's 2^D corner rows and weights, computed once per cell. A level's
// vertex row is dense (the vertex's linear index) when resolution^D fits in
// the level's entries, hashed (tiny-cuda-nn's prime hash) otherwise; uint32
// wrap-around as in tiny-cuda-nn.

// row % entries, cheap in the common cases: a row already below `entries`
// (dense levels, in-range points) and a power-of-two `entries` (every hashed
// level). Same value as `row % entries` in all cases.
MO_FN uint32 wrap_row(uint32 row, uint32 entries) {
  if ((entries & (entries - 1u)) == 0u) return row & (entries - 1u);
  return row < entries ? row : row % entries;
}

// Per-dimension factors of the corner row: the primes when hashed, the dense
// strides 1, res, res^2, ... otherwise (only used while resolution^D <= entries).
template <int D>
MO_FN void corner_factors(uint32 resolution, bool hashed, MO_THREAD uint32* factor) {
  uint32 stride = 1u;
  for (int d = 0; d < D; ++d) {
    factor[d] = hashed ? prime(d) : stride;
    stride *= resolution;
  }
}

// Corner idx of a cell before the final % entries: *row is the uint32 dense
// sum / hash, *weight the interpolation weight (the product of w[d] for upper
// and 1 - w[d] for lower vertices, d = 0 .. D-1 left to right). Branch-free, so
// a caller's loop over points vectorises.
template <int D>
MO_FN void corner_unwrapped(int idx, const MO_THREAD uint32* cell, const MO_THREAD float* w,
                            const MO_THREAD uint32* factor, bool hashed, MO_THREAD uint32* row,
                            MO_THREAD float* weight) {
  uint32 r = 0u;
  float wt = 1.0f;
  for (int d = 0; d < D; ++d) {
    const uint32 bit = (uint32(idx) >> uint32(d)) & 1u;
    const uint32 term = (cell[d] + bit) * factor[d];
    r = hashed ? (r ^ term) : (r + term);
    wt *= bit ? w[d] : 1.0f - w[d];
  }
  *row = r;
  *weight = wt;
}

// All 2^D corners of a cell before the final % entries.
template <int D>
MO_FN void cell_corners_unwrapped(const MO_THREAD uint32* cell, const MO_THREAD float* w, uint32 resolution,
                                  bool hashed, MO_THREAD uint32* rows, MO_THREAD float* weights) {
  uint32 factor[D];
  corner_factors<D>(resolution, hashed, factor);
  for (int idx = 0; idx < (1 << D); ++idx) corner_unwrapped<D>(idx, cell, w, factor, hashed, &rows[idx], &weights[idx]);
}

// All 2^D corners of a cell (bit d of idx set = upper vertex along d): their
// rows within the level and interpolation weights.
template <int D>
MO_FN void cell_corners(const MO_THREAD uint32* cell, const MO_THREAD float* w, uint32 resolution,
                        uint32 entries, bool hashed, MO_THREAD uint32* rows, MO_THREAD float* weights) {
  cell_corners_unwrapped<D>(cell, w, resolution, hashed, rows, weights);
  for (int j = 0; j < (1 << D); ++j) rows[j] = wrap_row(rows[j], entries);
}

// Interpolated features of one level from its cell's corners: out[f] =
// sum_corners weight * row[f], accumulated in float32 with fma in
// tiny-cuda-nn's corner order.
template <int D, int F, typename T>
MO_FN void interpolate_corners(const MO_DEVICE T* level_table, const MO_THREAD uint32* rows,
                               const MO_THREAD float* weights, MO_THREAD float* out) {
  for (int f = 0; f < F; ++f) out[f] = 0.0f;
  for (int idx = 0; idx < (1 << D); ++idx) {
    const MO_DEVICE T* values = level_table + uint64(rows[idx]) * uint64(F);
    for (int f = 0; f < F; ++f) out[f] = fma_f(weights[idx], float(values[f]), out[f]);
  }
}

// Adds this level's contribution to dL/dx (before the out-of-range mask):
// dx[d] += scale * sum_corners dweight_d * <row, dy>, from the cell's corner rows.
template <int D, int F, typename T>
MO_FN void accumulate_input_gradient_corners(const MO_DEVICE T* level_table, const MO_THREAD uint32* rows,
                                             float scale, const MO_THREAD float* w, const MO_THREAD float* dw,
                                             const MO_THREAD float* dy, MO_THREAD float* dx) {
  for (uint32 idx = 0; idx < (1u << D); ++idx) {
    const MO_DEVICE T* values = level_table + uint64(rows[idx]) * uint64(F);
    float dot = 0.0f;
    for (int f = 0; f < F; ++f) dot = fma_f(float(values[f]), dy[f], dot);
    float dweight[D];
    corner_weight_gradient<D>(idx, w, dw, dweight);
    for (int d = 0; d < D; ++d) dx[d] = fma_f(scale * dweight[d], dot, dx[d]);
  }
}

// Second derivative (eikonal losses). grad_inputs is linear in the table and
// in grad_encoded: grad_inputs[d] = mask[d] * sum_levels sum_corners
// scale * dweight_d * <row, dy>. Given g[d] = dLoss/dgrad_inputs[d] * mask[d],
// the coefficient of corner idx, scale * sum_d dweight_d * g[d], multiplies dy
// to give dLoss/drow, and the row to give dLoss/ddy.
template <int D>
MO_FN float input_gradient_coefficient(uint32 idx, const MO_THREAD float* w, const MO_THREAD float* dw,
                                       float scale, const MO_THREAD float* g) {
  float dweight[D];
  corner_weight_gradient<D>(idx, w, dw, dweight);
  float s = 0.0f;
  for (int d = 0; d < D; ++d) s = fma_f(scale * dweight[d], g[d], s);
  return s;
}

}  // namespace hash_grid
}  // namespace mo

#endif  // MO_KERNELS_COMMON_HASH_GRID_H_
