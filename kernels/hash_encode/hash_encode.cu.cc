// HashEncode CUDA kernels and launchers (hash_encode.h: the design and the declarations).
// Every formula (coordinates, cells, weights, rows, hashing, input-gradient
// terms) comes from kernels/common/hash_grid.h; this file adds only memory
// access (vector loads/stores, atomics, shared-memory aggregation) and the
// launch arithmetic.
#include "kernels/hash_encode/hash_encode.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/sum_parts.h"

namespace mo {
namespace cuda {
namespace {

using hash_grid::Params;

constexpr int kHashThreads = 256;
// Default shared-memory budget for coarse-level pre-aggregation (per block).
constexpr int64_t kDefaultAggregateBytes = 48 * 1024;
// Largest dynamic shared memory we ever ask for (H100 allows 227 KB).
constexpr int64_t kMaxAggregateBytes = 200 * 1024;
constexpr int kMaxLevelsPerBlock = 4;
constexpr int kMaxForwardLevelsPerBlock = 4;
// Largest table slice one forward level group may span: a group's blocks run
// together (groups in order), so its rows must stay hot in L2; twice this
// thrashes the H100's (docs/HASH_ENCODE_GPU.md).
constexpr int64_t kForwardGroupTableBytes = int64_t(16) << 20;

// ---- launch arithmetic, in one place ----------------------------------------------

// Levels per group: the lanes of G levels of one point are adjacent and write
// G * F * sizeof(T) bytes of its output row together (a whole 32-byte sector
// when that fits), and G levels at a time keep their slice of the table hot
// in L2. Capped at max_levels (the best measured count, 4, for the backward
// and the forward; docs/HASH_ENCODE_GPU.md). G is a power of two,
// no larger than the level count (rounded down).
// levels_per_block > 0 overrides the choice (tuning; at most 32, rounded up
// to a power of two, then down to the level count).
inline int LevelGroupShift(int features, int elem_bytes, int num_levels, int max_levels, int levels_per_block = 0) {
  int group = std::min(32 / (features * elem_bytes), max_levels);
  if (levels_per_block > 0) group = std::min(levels_per_block, 32);
  if (group < 1) group = 1;
  while (group > 1 && group > num_levels) group >>= 1;
  int shift = 0;
  while ((1 << shift) < group) ++shift;
  return shift;
}

inline int NumGroups(int num_levels, int shift) { return (num_levels + (1 << shift) - 1) >> shift; }

// Point blocks for a kernel whose blocks hold `points_per_block` points each
// (kernels loop over the remainder with 64-bit indices).
inline unsigned int PointBlocks(int64_t num_points, int points_per_block) {
  const int64_t wanted = (num_points + points_per_block - 1) / points_per_block;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t(1) << 30)));
}

// The forward's level groups: group k has 2^shift[k] levels from
// first_level[k] and owns blocks first_block[k] .. first_block[k + 1] - 1.
struct ForwardGroups {
  int64_t first_block[hash_grid::kMaxLevels + 1];
  int first_level[hash_grid::kMaxLevels];
  int shift[hash_grid::kMaxLevels];
  // interleaved[k]: groups k and k + 1 (k even) run their blocks alternately.
  bool interleaved[hash_grid::kMaxLevels];
  int count;
};

// Groups of G levels (LevelGroupShift), except that a group doubles (up to
// kMaxForwardLevelsPerBlock levels) while its table slice stays within
// kForwardGroupTableBytes: with few features per level (G below the cap),
// small coarse levels share blocks and the coordinates are loaded fewer
// times (docs/HASH_ENCODE_GPU.md has the measurements). levels_per_block > 0
// fixes G.
inline ForwardGroups MakeForwardGroups(int features, int elem_bytes, const Params& p, int levels_per_block) {
  const int base_shift = LevelGroupShift(features, elem_bytes, p.num_levels, kMaxForwardLevelsPerBlock,
                                         levels_per_block);
  const int64_t row_bytes = int64_t(features) * elem_bytes;
  ForwardGroups g;
  g.count = 0;
  int64_t blocks = 0;
  for (int first = 0, shift; first < p.num_levels; first += 1 << shift) {
    shift = base_shift;
    while (levels_per_block <= 0 && (2 << shift) <= kMaxForwardLevelsPerBlock &&
           first + (2 << shift) <= p.num_levels &&
           (p.level_offsets[first + (2 << shift)] - p.level_offsets[first]) * row_bytes <= kForwardGroupTableBytes) {
      ++shift;
    }
    g.first_block[g.count] = blocks;
    g.first_level[g.count] = first;
    g.shift[g.count] = shift;
    ++g.count;
    const int points_per_block = kHashThreads >> (shift + 1);  // two lanes per (point, level)
    blocks += (p.num_points + points_per_block - 1) / points_per_block;
  }
  g.first_block[g.count] = blocks;
  // A point's outputs of one group that fill less than a 32-byte sector
  // (float16 with F = 2: 4 levels, 16 bytes) leave the sector half written
  // until the next group writes the rest; far apart in time, L2 evicts the
  // half sector and DRAM merges it (read-modify-write). Pairs of such groups
  // with the same block count run their blocks alternately, so both halves
  // land close together.
  for (int k = 0; k < g.count; ++k) g.interleaved[k] = false;
  for (int k = 0; k + 1 < g.count; k += 2) {
    const int64_t bytes = (int64_t(1) << g.shift[k]) * row_bytes;
    g.interleaved[k] = bytes < 32 && g.shift[k + 1] == g.shift[k] &&
                       g.first_block[k + 1] - g.first_block[k] == g.first_block[k + 2] - g.first_block[k + 1];
  }
  return g;
}

inline size_t AlignUp(size_t bytes) { return (bytes + 255) & ~size_t(255); }

// ---- element conversion and vector row access ----------------------------------------

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }

template <typename T>
__device__ __forceinline__ float WordElement(const uint32_t* words, int e) {
  if constexpr (std::is_same<T, float>::value) {
    return __uint_as_float(words[e]);
  } else {
    const unsigned short bits = static_cast<unsigned short>(words[e >> 1] >> ((e & 1) * 16));
    return __half2float(__ushort_as_half(bits));
  }
}

template <typename T>
__device__ __forceinline__ uint32_t ElementBits(float v) {
  if constexpr (std::is_same<T, float>::value) {
    return __float_as_uint(v);
  } else {
    return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(v)));
  }
}

// One row of F features (F * sizeof(T) bytes, aligned to min(that, 16)) in
// one vector load (two for 32-byte rows), converted to float.
template <int F, typename T>
__device__ __forceinline__ void LoadRow(const T* __restrict__ p, float* out) {
  constexpr int kBytes = F * int(sizeof(T));
  constexpr int kWords = kBytes < 4 ? 1 : kBytes / 4;
  uint32_t w[kWords];
  if constexpr (kBytes == 2) {
    w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else if constexpr (kBytes == 4) {
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else if constexpr (kBytes == 8) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = u.x;
    w[1] = u.y;
  } else {
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + k);
      w[4 * k] = u.x;
      w[4 * k + 1] = u.y;
      w[4 * k + 2] = u.z;
      w[4 * k + 3] = u.w;
    }
  }
#pragma unroll
  for (int f = 0; f < F; ++f) out[f] = WordElement<T>(w, f);
}

// Stores one row of F features (aligned to min(F * sizeof(T), 16)) with
// streaming stores (st.global.cs): the forward output is written once and not
// read again by the kernel, so its lines are the first L2 evicts, not the
// table's.
template <int F, typename T>
__device__ __forceinline__ void StoreRowStreaming(T* __restrict__ p, const float* v) {
  constexpr int kBytes = F * int(sizeof(T));
  constexpr int kWords = kBytes < 4 ? 1 : kBytes / 4;
  uint32_t w[kWords];
  if constexpr (std::is_same<T, float>::value) {
#pragma unroll
    for (int f = 0; f < F; ++f) w[f] = ElementBits<T>(v[f]);
  } else {
#pragma unroll
    for (int k = 0; k < kWords; ++k) w[k] = 0u;
#pragma unroll
    for (int f = 0; f < F; ++f) w[f >> 1] |= ElementBits<T>(v[f]) << ((f & 1) * 16);
  }
  if constexpr (kBytes == 2) {
    __stcs(reinterpret_cast<unsigned short*>(p), static_cast<unsigned short>(w[0]));
  } else if constexpr (kBytes == 4) {
    __stcs(reinterpret_cast<unsigned int*>(p), w[0]);
  } else if constexpr (kBytes == 8) {
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
  } else {
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) {
      __stcs(reinterpret_cast<uint4*>(p) + k, make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]));
    }
  }
}

// ---- table-gradient accumulators ------------------------------------------------------

// float32 sums (grad_table itself for float tables, a scratch buffer for half).
struct FloatAccumulator {
  float* sums;
  typedef float Shared;
  __device__ __forceinline__ Shared ToShared(float v) const { return v; }
  // K consecutive floats at p (aligned to min(4K, 16) bytes), as vector
  // red/atomic adds where sm_90 has them.
  template <int K>
  __device__ __forceinline__ static void AddAt(float* p, const float* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (K == 2) {
      atomicAdd(reinterpret_cast<float2*>(p), make_float2(v[0], v[1]));
    } else if constexpr (K == 4 || K == 8) {
#pragma unroll
      for (int k = 0; k < K / 4; ++k) {
        atomicAdd(reinterpret_cast<float4*>(p) + k, make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]));
      }
    } else {
      atomicAdd(p, v[0]);
    }
#else
#pragma unroll
    for (int k = 0; k < K; ++k) atomicAdd(p + k, v[k]);
#endif
  }
  // Contributions to rows lo and hi (an x-pair of corners) of the level at
  // row `offset` (a multiple of 8): one vector atomic when they share an
  // aligned two-row block and 2F floats fit 16 bytes. Hashed levels give
  // hi == lo ^ 1 whenever the cell's x is even (prime 1 on x), dense levels
  // hi == lo + 1.
  template <int F>
  __device__ __forceinline__ void AddCornerPair(int64_t offset, uint32 lo, uint32 hi, const float* vlo,
                                                const float* vhi) const {
    if constexpr (F <= 2) {
      if ((lo ^ hi) == 1u) {
        const bool odd = (lo & 1u) != 0u;
        float both[2 * F];
#pragma unroll
        for (int f = 0; f < F; ++f) {
          both[f] = odd ? vhi[f] : vlo[f];
          both[F + f] = odd ? vlo[f] : vhi[f];
        }
        AddAt<2 * F>(sums + (offset + (lo & ~1u)) * F, both);
        return;
      }
    }
    AddAt<F>(sums + (offset + lo) * F, vlo);
    AddAt<F>(sums + (offset + hi) * F, vhi);
  }
  __device__ __forceinline__ void AddTotal(int64_t flat, Shared s) const { atomicAdd(sums + flat, s); }
  __device__ __forceinline__ static void SharedAdd(Shared* s, Shared v) { atomicAdd(s, v); }
};

// 64-bit fixed point: integer addition is associative, so the sums (and the
// table gradient converted from them) do not depend on the order of atomics.
struct FixedAccumulator {
  unsigned long long* sums;
  const float* scale;  // device: {2^k, 2^-k}
  typedef unsigned long long Shared;
  __device__ __forceinline__ Shared ToShared(float v) const {
    return static_cast<unsigned long long>(__float2ll_rn(v * __ldg(scale)));
  }
  template <int F>
  __device__ __forceinline__ void AddRow(int64_t row, const float* v) const {
#pragma unroll
    for (int f = 0; f < F; ++f) {
      const Shared q = ToShared(v[f]);
      if (q != 0ull) atomicAdd(sums + row * F + f, q);
    }
  }
  template <int F>
  __device__ __forceinline__ void AddCornerPair(int64_t offset, uint32 lo, uint32 hi, const float* vlo,
                                                const float* vhi) const {
    AddRow<F>(offset + lo, vlo);
    AddRow<F>(offset + hi, vhi);
  }
  __device__ __forceinline__ void AddTotal(int64_t flat, Shared s) const { atomicAdd(sums + flat, s); }
  __device__ __forceinline__ static void SharedAdd(Shared* s, Shared v) {
    if (v != 0ull) atomicAdd(s, v);
  }
};

// ---- per-(point, level) geometry from hash_grid.h -------------------------------------

// A level's geometry from the host's per-level table (Params), plus its row offset.
struct LevelGeometry {
  float scale;
  uint32 resolution;
  uint32 entries;
  int64_t offset;
  bool hashed;
};

template <int D>
__device__ __forceinline__ LevelGeometry GeometryOf(const Params& p, int level) {
  const hash_grid::LevelGeometry t = hash_grid::params_level(p, level);
  LevelGeometry g;
  g.scale = t.scale;
  g.resolution = t.resolution;
  g.entries = t.entries;
  g.offset = p.level_offsets[level];
  g.hashed = t.hashed;
  return g;
}

// Out-of-range rule, then cell / weights of every dimension. False when the
// point is zeroed (NaN / inf anywhere, or outside [0,1]^D in "zero" mode).
template <int D>
__device__ __forceinline__ bool LocatePoint(const float* __restrict__ x, const Params& p, float scale, uint32* cell,
                                            float* w, float* dw, float* mask) {
  float used[D];
  bool valid = true;
#pragma unroll
  for (int d = 0; d < D; ++d) valid &= hash_grid::prepare_coordinate(__ldg(x + d), p.out_of_range, &used[d], &mask[d]);
  if (!valid) return false;
#pragma unroll
  for (int d = 0; d < D; ++d) hash_grid::locate(used[d], scale, p.interpolation, &cell[d], &w[d], &dw[d]);
  return true;
}

// ---- forward -------------------------------------------------------------------------

// Two lanes per (point, level). Lane `side` 0 owns the x-lower corner of every
// x-pair (corners c, c + 1 of hash_grid.h's order), lane 1 the x-upper one.
// Both load their row of a pair in the same instruction, so when the two rows
// share a 128-byte line (a 32-byte sector for 3 pairs in 4 with random points,
// on hashed and dense levels alike) the warp sends one L2 request for both;
// one thread loading both rows needs two instructions, hence two requests,
// whenever they are not in one aligned 16-byte block. The kernel is bound by
// these L2 requests (profile in docs/HASH_ENCODE_GPU.md). Each lane gets the other's value
// through one shuffle per pair and feature and interpolates half of the
// features (F = 1: both lanes compute feature 0, lane 0 stores it) in
// interpolate_corners()'s fma order, so results are bit-identical to one
// thread summing all corners. Level groups: MakeForwardGroups.
template <int D, int F, typename T>
__global__ void __launch_bounds__(kHashThreads)
    HashEncodeForwardKernel(const float* __restrict__ inputs, const T* __restrict__ table, T* __restrict__ encoded,
                            const Params p, const ForwardGroups groups) {
  constexpr int kLaneFeatures = (F + 1) / 2;
  const int side = threadIdx.x & 1;
  // The two lanes of a pair work on the same point and level, so they take
  // the same branches and meet at every shuffle: the mask names only them.
  const unsigned int pair_mask = 3u << (threadIdx.x & 30u);
  const int first_feature = side * (F / 2);
  const int num_levels = p.num_levels;
  // One-dimensional grid, blocks in group order (all of group 0, then all of
  // group 1, ...: a group's table slice stays hot in L2 while its blocks run;
  // an interleaved pair of groups alternates blocks); a block handles
  // consecutive points of one group (a loop past 2^30 blocks).
  for (int64_t b = blockIdx.x; b < groups.first_block[groups.count]; b += gridDim.x) {
    int k = 0;
    while (b >= groups.first_block[k + 1]) ++k;  // uniform per block
    int64_t local = b - groups.first_block[k];
    const int pair_first = (k & 1) ? k - 1 : k;
    if (groups.interleaved[pair_first]) {
      const int64_t q = b - groups.first_block[pair_first];
      k = pair_first + static_cast<int>(q & 1);
      local = q >> 1;
    }
    const int group_shift = groups.shift[k];
    const int points_per_block = kHashThreads >> (group_shift + 1);
    const int level = groups.first_level[k] + ((threadIdx.x >> 1) & ((1 << group_shift) - 1));
    const int64_t i = local * points_per_block + (threadIdx.x >> (group_shift + 1));
    if (level >= num_levels || i >= p.num_points) continue;  // both lanes of a pair together
    const LevelGeometry g = GeometryOf<D>(p, level);
    const T* level_table = table + g.offset * F;
    float out[kLaneFeatures];
#pragma unroll
    for (int f = 0; f < kLaneFeatures; ++f) out[f] = 0.0f;
    uint32 cell[D];
    float w[D], dw[D], mask[D];
    if (LocatePoint<D>(inputs + i * D, p, g.scale, cell, w, dw, mask)) {
      uint32 rows[1 << D];
      float weights[1 << D];
      hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
      // Corner c + 1 (x upper) of the cell is corner c of the cell one step up
      // in x, so this lane's rows are the even corners of `own_cell`.
      uint32 own_cell[D];
#pragma unroll
      for (int d = 0; d < D; ++d) own_cell[d] = cell[d] + (d == 0 ? uint32(side) : 0u);
      uint32 own_rows[1 << D];
      float own_cell_weights[1 << D];  // unused
      hash_grid::cell_corners<D>(own_cell, w, g.resolution, g.entries, g.hashed, own_rows, own_cell_weights);
      float own[1 << (D - 1)][F];
#pragma unroll
      for (int c = 0; c < (1 << D); c += 2) LoadRow<F, T>(level_table + uint64_t(own_rows[c]) * F, own[c >> 1]);
#pragma unroll
      for (int c = 0; c < (1 << D); c += 2) {
#pragma unroll
        for (int f = 0; f < kLaneFeatures; ++f) {
          // This lane's feature first_feature + f of its own row, and the one
          // the other lane needs (feature (F / 2) - first_feature + f).
          const float mine = side ? own[c >> 1][F / 2 + f] : own[c >> 1][f];
          const float wanted = side ? own[c >> 1][f] : own[c >> 1][F / 2 + f];
          const float theirs = __shfl_xor_sync(pair_mask, wanted, 1);
          const float lower = side ? theirs : mine;
          const float upper = side ? mine : theirs;
          // interpolate_corners()'s sum: fma in corner order, float32.
          out[f] = mo::fma_f(weights[c], lower, out[f]);
          out[f] = mo::fma_f(weights[c + 1], upper, out[f]);
        }
      }
    }
    if (F > 1 || side == 0) {
      StoreRowStreaming<kLaneFeatures, T>(encoded + (i * num_levels + level) * F + first_feature, out);
    }
  }
}

// ---- backward ------------------------------------------------------------------------

enum DxMode { kDxNone = 0, kDxStore = 1, kDxAtomic = 2 };

// Adds coef[c] * v to corner c's row of the level at row `offset`, for the
// 2^D corners of a cell, by x-pairs (c has x lower, c + 1 x upper).
template <int D, int F, typename Acc>
__device__ __forceinline__ void ScatterCorners(const Acc& acc, int64_t offset, const uint32* rows, const float* coef,
                                               const float* v) {
#pragma unroll
  for (int c = 0; c < (1 << D); c += 2) {
    float lower[F], upper[F];
#pragma unroll
    for (int f = 0; f < F; ++f) {
      lower[f] = coef[c] * v[f];
      upper[f] = coef[c + 1] * v[f];
    }
    acc.template AddCornerPair<F>(offset, rows[c], rows[c + 1], lower, upper);
  }
}

// One thread per (point, level): scatters weight * dy to the 2^D corner rows
// (levels >= first_scatter_level; coarser ones are aggregated by
// HashEncodeCoarseBackwardKernel) and, when dx_mode != kDxNone, computes the
// level's input gradient from the same rows; the G levels of a group are
// summed with a fixed butterfly of warp shuffles, then stored
// (dx_out[(group * N + i) * D + d], kDxStore) or atomically added
// (dx_out[i * D + d], kDxAtomic).
template <int D, int F, typename T, typename Acc>
__global__ void __launch_bounds__(kHashThreads)
    HashEncodeBackwardKernel(const T* __restrict__ grad_encoded, const float* __restrict__ inputs,
                             const T* __restrict__ table, const Acc acc, float* __restrict__ dx_out,
                             const int dx_mode, const int first_scatter_level, const bool table_grad,
                             const Params p, const int group_shift) {
  const int group_size = 1 << group_shift;
  const int lane_level = threadIdx.x & (group_size - 1);
  const int points_per_block = kHashThreads >> group_shift;
  const int num_levels = p.num_levels;
  const int level = (blockIdx.y << group_shift) + lane_level;
  const bool level_ok = level < num_levels;
  const bool scatter = table_grad && level_ok && level >= first_scatter_level;
  const bool input_grad = dx_mode != kDxNone;
  if (!scatter && !input_grad) return;  // no shuffles follow in that case
  const LevelGeometry g = GeometryOf<D>(p, level_ok ? level : num_levels - 1);
  const T* level_table = table + g.offset * F;

  for (int64_t b = blockIdx.x; b * points_per_block < p.num_points; b += gridDim.x) {  // uniform per block
    const int64_t i = b * points_per_block + (threadIdx.x >> group_shift);
    float dx[D];
#pragma unroll
    for (int d = 0; d < D; ++d) dx[d] = 0.0f;
    if (level_ok && i < p.num_points) {
      uint32 cell[D];
      float w[D], dw[D], mask[D];
      if (LocatePoint<D>(inputs + i * D, p, g.scale, cell, w, dw, mask)) {
        float dy[F];
        LoadRow<F, T>(grad_encoded + (i * num_levels + level) * F, dy);
        uint32 rows[1 << D];
        float weights[1 << D];
        hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
        if (scatter) ScatterCorners<D, F>(acc, g.offset, rows, weights, dy);
        if (input_grad) {
          hash_grid::accumulate_input_gradient_corners<D, F, T>(level_table, rows, g.scale, w, dw, dy, dx);
#pragma unroll
          for (int d = 0; d < D; ++d) dx[d] *= mask[d];
        }
      }
    }
    if (input_grad) {
      for (int s = group_size >> 1; s > 0; s >>= 1) {
#pragma unroll
        for (int d = 0; d < D; ++d) dx[d] += __shfl_xor_sync(0xffffffffu, dx[d], s);
      }
      if (lane_level == 0 && i < p.num_points) {
        if (dx_mode == kDxStore) {
          float* out = dx_out + (int64_t(blockIdx.y) * p.num_points + i) * D;
#pragma unroll
          for (int d = 0; d < D; ++d) out[d] = dx[d];
        } else {
#pragma unroll
          for (int d = 0; d < D; ++d) atomicAdd(dx_out + i * D + d, dx[d]);
        }
      }
    }
  }
}

// Coarse dense levels (blockIdx.y = level < number of aggregated levels):
// each block sweeps a slice of the points, sums weight * dy per table entry
// in shared memory, then adds its non-zero sums to the accumulator. Turns
// N * 2^D contended atomics per level into about blocks * entries.
template <int D, int F, typename T, typename Acc>
__global__ void __launch_bounds__(kHashThreads)
    HashEncodeCoarseBackwardKernel(const T* __restrict__ grad_encoded, const float* __restrict__ inputs,
                                   const Acc acc, const Params p) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  typedef typename Acc::Shared S;
  S* sums = reinterpret_cast<S*>(shared_raw);
  const int level = blockIdx.y;
  const int num_levels = p.num_levels;
  const LevelGeometry g = GeometryOf<D>(p, level);
  const int n = static_cast<int>(g.entries) * F;
  for (int k = threadIdx.x; k < n; k += blockDim.x) sums[k] = S(0);
  __syncthreads();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.num_points; i += stride) {
    uint32 cell[D];
    float w[D], dw[D], mask[D];
    if (!LocatePoint<D>(inputs + i * D, p, g.scale, cell, w, dw, mask)) continue;
    float dy[F];
    LoadRow<F, T>(grad_encoded + (i * num_levels + level) * F, dy);
    uint32 rows[1 << D];
    float weights[1 << D];
    hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
#pragma unroll
    for (int c = 0; c < (1 << D); ++c) {
#pragma unroll
      for (int f = 0; f < F; ++f) Acc::SharedAdd(&sums[rows[c] * F + f], acc.ToShared(weights[c] * dy[f]));
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < n; k += blockDim.x) {
    const S s = sums[k];
    if (s != S(0)) acc.AddTotal(g.offset * F + k, s);
  }
}

// max(m, v) for v >= 0 or NaN; NaN counts as +inf.
__device__ __forceinline__ float MaxWithNan(float m, float v) { return (v != v) ? INFINITY : fmaxf(m, v); }

// *bits = max(*bits, the largest m of the warp) as float bits (non-negative
// floats order like their bits). Every lane of the warp calls it.
__device__ __forceinline__ void AtomicMaxOfWarp(float m, unsigned int* bits) {
  for (int s = 16; s > 0; s >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
  if ((threadIdx.x & 31) == 0) atomicMax(bits, __float_as_uint(m));
}

// max |x| over x[0..n) as float bits; NaN counts as +inf. *bits must start at 0.
template <typename T>
__global__ void MaxAbsKernel(const T* __restrict__ x, int64_t n, unsigned int* bits) {
  float m = 0.0f;
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) m = MaxWithNan(m, fabsf(ToFloat(x[i])));
  AtomicMaxOfWarp(m, bits);
}

// Fixed-point scale 2^k with (bound * N) * 2^k <= 2^62, where *bits (float
// bits) bounds what one (point, level) adds to one table entry: max|dy| for
// the backward (a point's corner weights in a level sum to 1), the largest
// sum_corners |coefficient| * |dy| for the second order. Every per-entry sum
// (at most N * bound) then fits in int64 with a factor 2 to spare.
__global__ void FixedScaleKernel(const unsigned int* bits, int64_t num_points, float* scale) {
  const float bound = __uint_as_float(*bits) * static_cast<float>(num_points);
  int k = 0;
  if (bound > 0.0f && !isinf(bound)) {
    int e = 0;
    frexpf(bound, &e);  // bound < 2^e
    k = min(126, max(-126, 62 - e));
  }
  scale[0] = ldexpf(1.0f, k);
  scale[1] = ldexpf(1.0f, -k);
}

template <typename T>
__global__ void FixedToTableKernel(const unsigned long long* __restrict__ sums, const float* __restrict__ scale,
                                   T* __restrict__ out, int64_t n) {
  const float inv = scale[1];
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    out[i] = FromFloat<T>(static_cast<float>(static_cast<long long>(sums[i])) * inv);
  }
}

__global__ void FloatToHalfKernel(const float* __restrict__ in, __half* __restrict__ out, int64_t n) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) out[i] = __float2half_rn(in[i]);
}

// ---- dispatch over (D, F) -------------------------------------------------------------

template <int D, typename Fn>
cudaError_t DispatchFeatures(int features, Fn&& fn) {
  switch (features) {
    case 1: return fn(std::integral_constant<int, D>(), std::integral_constant<int, 1>());
    case 2: return fn(std::integral_constant<int, D>(), std::integral_constant<int, 2>());
    case 4: return fn(std::integral_constant<int, D>(), std::integral_constant<int, 4>());
    case 8: return fn(std::integral_constant<int, D>(), std::integral_constant<int, 8>());
    default: return cudaErrorInvalidValue;
  }
}

template <typename Fn>
cudaError_t DispatchDimsFeatures(int dims, int features, Fn&& fn) {
  switch (dims) {
    case 1: return DispatchFeatures<1>(features, fn);
    case 2: return DispatchFeatures<2>(features, fn);
    case 3: return DispatchFeatures<3>(features, fn);
    case 4: return DispatchFeatures<4>(features, fn);
    default: return cudaErrorInvalidValue;
  }
}

bool ValidShape(int dims, int features, const Params& params) {
  return dims >= 1 && dims <= hash_grid::kMaxDims && (features == 1 || features == 2 || features == 4 ||
                                                       features == 8) &&
         params.num_levels >= 1 && params.num_levels <= hash_grid::kMaxLevels && params.num_points >= 0;
}

bool Aligned(const void* p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % std::min<size_t>(bytes, 16) == 0;
}

struct BackwardLayout {
  int group_shift = 0;
  int groups = 1;
  size_t fixed_sums = 0, float_sums = 0, dx_parts = 0, scale = 0;  // byte offsets
  bool has_fixed = false, has_float = false, has_dx_parts = false;
  size_t total = 0;
};

BackwardLayout LayoutFor(int dims, int features, int64_t table_rows, bool half_table, const Params& params,
                         const HashEncodeBackwardOptions& options) {
  BackwardLayout l;
  l.group_shift = LevelGroupShift(features, half_table ? 2 : 4, params.num_levels, kMaxLevelsPerBlock,
                                  options.levels_per_block);
  l.groups = NumGroups(params.num_levels, l.group_shift);
  size_t at = 0;
  const size_t entries = static_cast<size_t>(table_rows) * features;
  if (options.table_grad && options.deterministic) {
    l.has_fixed = true;
    l.fixed_sums = at;
    at += AlignUp(entries * sizeof(unsigned long long));
    l.scale = at;
    at += 256;
  } else if (options.table_grad && half_table) {
    l.has_float = true;
    l.float_sums = at;
    at += AlignUp(entries * sizeof(float));
  }
  if (options.input_grad && options.deterministic && l.groups > 1) {
    l.has_dx_parts = true;
    l.dx_parts = at;
    at += AlignUp(static_cast<size_t>(l.groups) * params.num_points * dims * sizeof(float));
  }
  l.total = at;
  return l;
}

// Leading levels that are dense, fit the shared budget and are hot enough
// (at least 4 points per entry) to profit from pre-aggregation.
template <int D>
int AggregatedLevels(int features, size_t shared_elem_bytes, int64_t budget, const Params& p) {
  int count = 0;
  for (int l = 0; l < p.num_levels; ++l) {
    const int64_t entries = p.level_offsets[l + 1] - p.level_offsets[l];
    if (p.level_hashed[l] != 0u) break;
    if (entries * features * static_cast<int64_t>(shared_elem_bytes) > budget) break;
    if (p.num_points < 4 * entries) break;
    ++count;
  }
  return count;
}

// ---- table-gradient sums of a launch (backward, second order) ----------------------------

// Where a launch sums its table gradient: the layout's fixed-point or float32
// sums in the workspace, or (float tables, not deterministic) grad_table itself.
struct TableSums {
  FloatAccumulator float_acc{nullptr};
  FixedAccumulator fixed_acc{nullptr, nullptr};
  unsigned int* bound_bits = nullptr;  // fixed point: FixedScaleKernel's bound, as float bits
  float* scale = nullptr;              // fixed point: {2^k, 2^-k}
};

// Points the sums into the workspace (or grad_table) and zeroes them (and the bound).
cudaError_t StartTableSums(const BackwardLayout& layout, unsigned char* ws, void* grad_table, int64_t n_table,
                           cudaStream_t stream, TableSums* s) {
  if (layout.has_fixed) {
    s->fixed_acc.sums = reinterpret_cast<unsigned long long*>(ws + layout.fixed_sums);
    s->bound_bits = reinterpret_cast<unsigned int*>(ws + layout.scale);
    s->scale = reinterpret_cast<float*>(ws + layout.scale + 16);
    s->fixed_acc.scale = s->scale;
    const cudaError_t err = cudaMemsetAsync(s->fixed_acc.sums, 0, n_table * sizeof(unsigned long long), stream);
    return err != cudaSuccess ? err : cudaMemsetAsync(s->bound_bits, 0, sizeof(unsigned int), stream);
  }
  s->float_acc.sums = layout.has_float ? reinterpret_cast<float*>(ws + layout.float_sums)
                                       : static_cast<float*>(grad_table);
  return cudaMemsetAsync(s->float_acc.sums, 0, n_table * sizeof(float), stream);
}

// grad_table from the sums where they are not grad_table itself.
template <typename T>
void FinishTableSums(const BackwardLayout& layout, const TableSums& s, T* grad_table, int64_t n_table,
                     cudaStream_t stream) {
  if (n_table == 0) return;
  if (layout.has_fixed) {
    FixedToTableKernel<T><<<GridStrideBlocks(n_table), kThreadsPerBlock, 0, stream>>>(s.fixed_acc.sums, s.scale,
                                                                                     grad_table, n_table);
  } else if (layout.has_float) {
    FloatToHalfKernel<<<GridStrideBlocks(n_table), kThreadsPerBlock, 0, stream>>>(
        s.float_acc.sums, reinterpret_cast<__half*>(grad_table), n_table);
  }
}

// ---- second order (MetalOpsHashEncodeGradGrad) --------------------------------------------

// Point i's corner rows at a level and their coefficients in the adjoint of
// the input gradient (hash_grid::input_gradient_coefficient), with
// grad_grad_inputs masked as the input gradient is (a masked value is never
// read: NaN stays out, as in the CPU's MaskedValue). False when the point is
// zeroed.
template <int D>
__device__ __forceinline__ bool SecondOrderCorners(const float* __restrict__ inputs, const float* __restrict__ gg,
                                                   int64_t i, const LevelGeometry& g, const Params& p, uint32* rows,
                                                   float* coef) {
  uint32 cell[D];
  float w[D], dw[D], mask[D], weights[1 << D], masked[D];
  if (!LocatePoint<D>(inputs + i * D, p, g.scale, cell, w, dw, mask)) return false;
  hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
#pragma unroll
  for (int d = 0; d < D; ++d) masked[d] = mask[d] != 0.0f ? __ldg(gg + i * D + d) : 0.0f;
#pragma unroll
  for (int c = 0; c < (1 << D); ++c) coef[c] = hash_grid::input_gradient_coefficient<D>(c, w, dw, g.scale, masked);
  return true;
}

// Deterministic mode's bound (FixedScaleKernel): the largest
// sum_corners |coefficient| * |dy[f]| of one (point, level), item k = i * L + level.
// *bits must start at 0.
template <int D, int F, typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    GradGradBoundKernel(const float* __restrict__ gg, const T* __restrict__ grad_encoded,
                        const float* __restrict__ inputs, const Params p, unsigned int* bits) {
  float m = 0.0f;
  for (int64_t k = GlobalThreadIndex(); k < p.num_points * p.num_levels; k += GlobalThreadCount()) {
    const int64_t i = k / p.num_levels;
    const LevelGeometry g = GeometryOf<D>(p, static_cast<int>(k - i * p.num_levels));
    uint32 rows[1 << D];
    float coef[1 << D], dy[F];
    if (!SecondOrderCorners<D>(inputs, gg, i, g, p, rows, coef)) continue;
    LoadRow<F, T>(grad_encoded + k * F, dy);
    float total = 0.0f;
#pragma unroll
    for (int c = 0; c < (1 << D); ++c) total += fabsf(coef[c]);
#pragma unroll
    for (int f = 0; f < F; ++f) m = MaxWithNan(m, total * fabsf(dy[f]));
  }
  AtomicMaxOfWarp(m, bits);
}

// One thread per (point, level), item k = i * L + level: adds coefficient *
// dy to the table sums of the level's corner rows and writes
// grad_grad_encoded[k * F + f] = sum_corners coefficient * row[f]
// (interpolate_corners with the coefficients as weights); zero for a zeroed point.
template <int D, int F, typename T, typename Acc>
__global__ void __launch_bounds__(kThreadsPerBlock)
    HashEncodeGradGradKernel(const float* __restrict__ gg, const T* __restrict__ grad_encoded,
                             const float* __restrict__ inputs, const T* __restrict__ table, const Acc acc,
                             T* __restrict__ grad_grad_encoded, const Params p) {
  for (int64_t k = GlobalThreadIndex(); k < p.num_points * p.num_levels; k += GlobalThreadCount()) {
    const int64_t i = k / p.num_levels;
    const LevelGeometry g = GeometryOf<D>(p, static_cast<int>(k - i * p.num_levels));
    uint32 rows[1 << D];
    float coef[1 << D], out[F];
#pragma unroll
    for (int f = 0; f < F; ++f) out[f] = 0.0f;
    if (SecondOrderCorners<D>(inputs, gg, i, g, p, rows, coef)) {
      float dy[F];
      LoadRow<F, T>(grad_encoded + k * F, dy);
      ScatterCorners<D, F>(acc, g.offset, rows, coef, dy);
      hash_grid::interpolate_corners<D, F, T>(table + g.offset * F, rows, coef, out);
    }
#pragma unroll
    for (int f = 0; f < F; ++f) grad_grad_encoded[k * F + f] = FromFloat<T>(out[f]);
  }
}

// The second order's table sums: the backward's, table gradient only.
BackwardLayout GradGradLayout(int dims, int features, int64_t table_rows, bool half_table, const Params& params,
                              bool deterministic) {
  HashEncodeBackwardOptions options;
  options.table_grad = true;
  options.input_grad = false;
  options.deterministic = deterministic;
  return LayoutFor(dims, features, table_rows, half_table, params, options);
}

template <int D, int F, typename T>
void LaunchGradGradKernels(const float* gg, const T* grad_encoded, const float* inputs, const T* table,
                           const TableSums& sums, bool fixed, T* grad_grad_encoded, const Params& p,
                           cudaStream_t stream) {
  const unsigned int blocks = GridStrideBlocks(p.num_points * p.num_levels);
  if (fixed) {
    GradGradBoundKernel<D, F, T><<<blocks, kThreadsPerBlock, 0, stream>>>(gg, grad_encoded, inputs, p,
                                                                          sums.bound_bits);
    FixedScaleKernel<<<1, 1, 0, stream>>>(sums.bound_bits, p.num_points, sums.scale);
    HashEncodeGradGradKernel<D, F, T><<<blocks, kThreadsPerBlock, 0, stream>>>(
        gg, grad_encoded, inputs, table, sums.fixed_acc, grad_grad_encoded, p);
  } else {
    HashEncodeGradGradKernel<D, F, T><<<blocks, kThreadsPerBlock, 0, stream>>>(
        gg, grad_encoded, inputs, table, sums.float_acc, grad_grad_encoded, p);
  }
}

int NumSms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 80;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) return 80;
  return sms;
}

template <int D, int F, typename T, typename Acc>
cudaError_t LaunchBackwardKernels(const T* grad_encoded, const float* inputs, const T* table, const Acc& acc,
                                  float* dx_out, int dx_mode, bool table_grad, int64_t budget,
                                  const BackwardLayout& layout, const Params& p, cudaStream_t stream) {
  int first_scatter = 0;
  if (table_grad && budget > 0) {
    first_scatter = AggregatedLevels<D>(F, sizeof(typename Acc::Shared), budget, p);
  }
  if (first_scatter > 0) {
    int64_t max_entries = 0;
    for (int l = 0; l < first_scatter; ++l) {
      max_entries = std::max<int64_t>(max_entries, p.level_offsets[l + 1] - p.level_offsets[l]);
    }
    const size_t shared = static_cast<size_t>(max_entries) * F * sizeof(typename Acc::Shared);
    auto kernel = HashEncodeCoarseBackwardKernel<D, F, T, Acc>;
    if (shared > 48 * 1024) {
      const cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
      if (err != cudaSuccess) return err;
    }
    const int64_t per_level = std::max<int64_t>(1, (2 * NumSms() + first_scatter - 1) / first_scatter);
    const int64_t useful = (p.num_points + 4 * kHashThreads - 1) / (4 * kHashThreads);
    const dim3 grid(static_cast<unsigned int>(std::max<int64_t>(1, std::min(per_level, useful))), first_scatter);
    kernel<<<grid, kHashThreads, shared, stream>>>(grad_encoded, inputs, acc, p);
  }
  const int points_per_block = kHashThreads >> layout.group_shift;
  const dim3 grid(PointBlocks(p.num_points, points_per_block), layout.groups);
  HashEncodeBackwardKernel<D, F, T, Acc><<<grid, kHashThreads, 0, stream>>>(
      grad_encoded, inputs, table, acc, dx_out, dx_mode, first_scatter, table_grad, p, layout.group_shift);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t LaunchHashEncodeForward(const float* inputs, const T* table, T* encoded, int dims, int features,
                                    const hash_grid::Params& params, cudaStream_t stream, int levels_per_block) {
  if (!ValidShape(dims, features, params)) return cudaErrorInvalidValue;
  const size_t row_bytes = static_cast<size_t>(features) * sizeof(T);
  if (!Aligned(table, 2 * row_bytes) || !Aligned(encoded, row_bytes)) return cudaErrorMisalignedAddress;
  if (params.num_points == 0) return cudaSuccess;
  const ForwardGroups groups = MakeForwardGroups(features, sizeof(T), params, levels_per_block);
  const unsigned int grid =
      static_cast<unsigned int>(std::min<int64_t>(groups.first_block[groups.count], int64_t(1) << 30));
  return DispatchDimsFeatures(dims, features, [&](auto d, auto f) {
    HashEncodeForwardKernel<decltype(d)::value, decltype(f)::value, T>
        <<<grid, kHashThreads, 0, stream>>>(inputs, table, encoded, params, groups);
    return cudaGetLastError();
  });
}

size_t HashEncodeBackwardWorkspaceBytes(int dims, int features, int64_t table_rows, bool half_table,
                                        const hash_grid::Params& params, const HashEncodeBackwardOptions& options) {
  return LayoutFor(dims, features, table_rows, half_table, params, options).total;
}

template <typename T>
cudaError_t LaunchHashEncodeBackward(const T* grad_encoded, const float* inputs, const T* table, T* grad_table,
                                     float* grad_inputs, void* workspace, size_t workspace_bytes, int dims,
                                     int features, int64_t table_rows, const hash_grid::Params& params,
                                     const HashEncodeBackwardOptions& options, cudaStream_t stream) {
  if (!ValidShape(dims, features, params) || table_rows < 0) return cudaErrorInvalidValue;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const BackwardLayout layout = LayoutFor(dims, features, table_rows, kHalf, params, options);
  if (workspace_bytes < layout.total || (layout.total > 0 && workspace == nullptr)) return cudaErrorInvalidValue;
  const size_t row_bytes = static_cast<size_t>(features) * sizeof(T);
  if (!Aligned(table, 2 * row_bytes) || !Aligned(grad_table, 2 * row_bytes) || !Aligned(grad_encoded, row_bytes) ||
      !Aligned(workspace, 256)) {
    return cudaErrorMisalignedAddress;
  }
  const int64_t n_table = table_rows * features;
  const int64_t n_points = params.num_points;
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  cudaError_t err = cudaSuccess;

  if (n_points == 0) {  // grad_table is all zeros, grad_inputs is empty
    if (options.table_grad && n_table > 0) err = cudaMemsetAsync(grad_table, 0, n_table * sizeof(T), stream);
    return err;
  }
  if (!options.table_grad && !options.input_grad) return cudaSuccess;

  // Table accumulator.
  TableSums sums;
  if (options.table_grad) {
    if ((err = StartTableSums(layout, ws, grad_table, n_table, stream, &sums))) return err;
    if (layout.has_fixed) {
      const int64_t n_dy = n_points * params.num_levels * features;
      MaxAbsKernel<T><<<GridStrideBlocks(n_dy), kThreadsPerBlock, 0, stream>>>(grad_encoded, n_dy, sums.bound_bits);
      FixedScaleKernel<<<1, 1, 0, stream>>>(sums.bound_bits, n_points, sums.scale);
    }
  }
  // Input-gradient destination.
  int dx_mode = kDxNone;
  float* dx_out = nullptr;
  if (options.input_grad) {
    if (layout.groups == 1) {
      dx_mode = kDxStore;
      dx_out = grad_inputs;
    } else if (layout.has_dx_parts) {
      dx_mode = kDxStore;
      dx_out = reinterpret_cast<float*>(ws + layout.dx_parts);
    } else {
      dx_mode = kDxAtomic;
      dx_out = grad_inputs;
      if ((err = cudaMemsetAsync(grad_inputs, 0, n_points * dims * sizeof(float), stream))) return err;
    }
  }
  const int64_t budget = options.aggregate_shared_bytes < 0
                             ? kDefaultAggregateBytes
                             : std::min<int64_t>(options.aggregate_shared_bytes, kMaxAggregateBytes);
  err = DispatchDimsFeatures(dims, features, [&](auto d, auto f) {
    constexpr int kD = decltype(d)::value;
    constexpr int kF = decltype(f)::value;
    if (layout.has_fixed) {
      return LaunchBackwardKernels<kD, kF, T>(grad_encoded, inputs, table, sums.fixed_acc, dx_out, dx_mode,
                                               options.table_grad, budget, layout, params, stream);
    }
    return LaunchBackwardKernels<kD, kF, T>(grad_encoded, inputs, table, sums.float_acc, dx_out, dx_mode,
                                             options.table_grad, budget, layout, params, stream);
  });
  if (err != cudaSuccess) return err;
  // Finalisation.
  if (options.table_grad) FinishTableSums(layout, sums, grad_table, n_table, stream);
  if (layout.has_dx_parts) {
    // grad_inputs = the per-group sums, summed in group order.
    const cudaError_t err = LaunchSumParts(dx_out, layout.groups, n_points * dims, grad_inputs, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaGetLastError();
}

size_t HashEncodeGradGradWorkspaceBytes(int dims, int features, int64_t table_rows, bool half_table,
                                        const hash_grid::Params& params, bool deterministic) {
  return GradGradLayout(dims, features, table_rows, half_table, params, deterministic).total;
}

template <typename T>
cudaError_t LaunchHashEncodeGradGrad(const float* grad_grad_inputs, const T* grad_encoded, const float* inputs,
                                     const T* table, T* grad_table, T* grad_grad_encoded, void* workspace,
                                     size_t workspace_bytes, int dims, int features, int64_t table_rows,
                                     const hash_grid::Params& params, bool deterministic, cudaStream_t stream) {
  if (!ValidShape(dims, features, params) || table_rows < 0) return cudaErrorInvalidValue;
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const BackwardLayout layout = GradGradLayout(dims, features, table_rows, kHalf, params, deterministic);
  if (workspace_bytes < layout.total || (layout.total > 0 && workspace == nullptr)) return cudaErrorInvalidValue;
  const size_t row_bytes = static_cast<size_t>(features) * sizeof(T);
  if (!Aligned(grad_table, 2 * row_bytes) || !Aligned(grad_encoded, row_bytes) || !Aligned(workspace, 256)) {
    return cudaErrorMisalignedAddress;
  }
  const int64_t n_table = table_rows * features;
  if (params.num_points == 0) {  // grad_table is all zeros, grad_grad_encoded is empty
    return n_table > 0 ? cudaMemsetAsync(grad_table, 0, n_table * sizeof(T), stream) : cudaSuccess;
  }
  TableSums sums;
  cudaError_t err = StartTableSums(layout, static_cast<unsigned char*>(workspace), grad_table, n_table, stream, &sums);
  if (err != cudaSuccess) return err;
  err = DispatchDimsFeatures(dims, features, [&](auto d, auto f) {
    LaunchGradGradKernels<decltype(d)::value, decltype(f)::value, T>(grad_grad_inputs, grad_encoded, inputs, table,
                                                                     sums, layout.has_fixed, grad_grad_encoded,
                                                                     params, stream);
    return cudaGetLastError();
  });
  if (err != cudaSuccess) return err;
  FinishTableSums(layout, sums, grad_table, n_table, stream);
  return cudaGetLastError();
}

template cudaError_t LaunchHashEncodeForward<float>(const float*, const float*, float*, int, int,
                                                    const hash_grid::Params&, cudaStream_t, int);
template cudaError_t LaunchHashEncodeForward<__half>(const float*, const __half*, __half*, int, int,
                                                     const hash_grid::Params&, cudaStream_t, int);
template cudaError_t LaunchHashEncodeBackward<float>(const float*, const float*, const float*, float*, float*, void*,
                                                     size_t, int, int, int64_t, const hash_grid::Params&,
                                                     const HashEncodeBackwardOptions&, cudaStream_t);
template cudaError_t LaunchHashEncodeBackward<__half>(const __half*, const float*, const __half*, __half*, float*,
                                                      void*, size_t, int, int, int64_t, const hash_grid::Params&,
                                                      const HashEncodeBackwardOptions&, cudaStream_t);

template cudaError_t LaunchHashEncodeGradGrad<float>(const float*, const float*, const float*, const float*, float*,
                                                     float*, void*, size_t, int, int, int64_t,
                                                     const hash_grid::Params&, bool, cudaStream_t);
template cudaError_t LaunchHashEncodeGradGrad<__half>(const float*, const __half*, const float*, const __half*,
                                                      __half*, __half*, void*, size_t, int, int, int64_t,
                                                      const hash_grid::Params&, bool, cudaStream_t);

}  // namespace cuda
}  // namespace mo
