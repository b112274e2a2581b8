// HashEncode Metal shaders. Every formula comes from kernels/common/hash_grid.h;
// the entry points for each (D, F, dtype) are kernel templates, instantiated
// one line each under the names the host looks up. Embedded in the op library and compiled on the Mac at run
// time (kernels/metal/metal_kernel.mm); on every machine, compiled as C++
// through tests/metal_shim/msl_shim.h by tests/metal_shim/hash_encode_shim.cc.
// metal_ops: msl 3.0
//
// Entry points (D in 1..4, F in 1, 2, 4, 8, TN in float32 / float16):
//   hash_encode_forward_d<D>_f<F>_<TN>        one thread per (point, level)
//   hash_encode_table_grad_d<D>_f<F>_<TN>     one thread per (point, level),
//       scatters weight * dy into a float32 buffer with atomic_float adds
//       (atomic_fetch_add_explicit, never a plain +=: Apple's sample raced here)
//   hash_encode_table_grad_fixed_d<D>_f<F>_<TN>  the deterministic variant:
//       64-bit fixed-point sums (two 32-bit atomic words, carry propagated), a
//       power-of-two scale from max|dy| * N (hash_encode_max_abs_<TN>), so
//       the result does not depend on the order of the atomics
//   hash_encode_input_grad_d<D>_f<F>_<TN>     one thread per point, levels in
//       order (deterministic, no atomics); computed from the table rows, no
//       dy/dx stored by the forward pass
// Helpers: hash_encode_zero_u32, hash_encode_max_abs_<TN>,
//   hash_encode_fixed_to_table_<TN>, hash_encode_float_to_half.
//
// Threads are level-major (flat index t = level * N + point), so a dispatch
// works through one level's slice of the table at a time; the level of each
// (point, level) and its geometry come from the host (Params' per-level table).
#include "kernels/hash_encode/hash_encode.h"
#include "kernels/common/hash_grid.h"

// atomic_float / atomic_uint, memory_order_relaxed and the atomic functions
// live in namespace metal (in the MSL shim too).
using namespace metal;

namespace mo {
namespace hash_grid_metal {

using hash_grid::Params;

using hash_grid::LevelGeometry;

// (level, point) of flat thread index t = level * n + point, and the stride of
// a grid-stride loop over such indices, without a 64-bit division (Apple GPUs
// have no 64-bit divider): t < 2^32, so n <= t fits 32 bits whenever t / n > 0.
inline void split_level_point(uint t, int64 n, thread int& level, thread int64& point) {
  if (int64(t) < n) {
    level = 0;
    point = int64(t);
  } else {
    const uint n32 = uint(n);
    level = int(t / n32);
    point = int64(t % n32);
  }
}

// Walks (level, point) over t = gid, gid + grid_size, ... below n * num_levels,
// level-major (one level's slice of the table at a time).
struct LevelPointCursor {
  int level, level_step;
  int64 point, point_step, n;
  void start(uint gid, uint grid_size, int64 points) {
    n = points;
    split_level_point(gid, n, level, point);
    split_level_point(grid_size, n, level_step, point_step);
  }
  void next() {
    point += point_step;
    level += level_step;
    if (point >= n) {
      point -= n;
      ++level;
    }
  }
};

// Out-of-range rule for the point's coordinates; false when it is zeroed.
template <int D>
inline bool prepare_point(const device float* x, int out_of_range, thread float* used, thread float* mask) {
  bool valid = true;
  for (int d = 0; d < D; ++d) valid = hash_grid::prepare_coordinate(x[d], out_of_range, &used[d], &mask[d]) && valid;
  return valid;
}

template <int D>
inline void locate_point(const thread float* used, float scale, int interpolation, thread uint32* cell,
                         thread float* w, thread float* dw) {
  for (int d = 0; d < D; ++d) hash_grid::locate(used[d], scale, interpolation, &cell[d], &w[d], &dw[d]);
}

// Fixed-point scale 2^k with max|dy| * N * 2^k <= 2^62 (a point's corner
// weights in a level sum to 1, so no per-entry sum can pass 2^62).
inline void fixed_scale(uint max_abs_bits, int64 num_points, thread float* scale, thread float* inv_scale) {
  const float bound = as_type<float>(max_abs_bits) * float(num_points);
  int k = 0;
  if (bound > 0.0f && !metal::isinf(bound) && !metal::isnan(bound)) {
    int e = 0;
    metal::frexp(bound, e);  // bound < 2^e
    k = metal::clamp(62 - e, -126, 126);
  }
  *scale = metal::ldexp(1.0f, k);
  *inv_scale = metal::ldexp(1.0f, -k);
}

// 64-bit two's-complement add on a (lo, hi) pair of 32-bit atomic words: the
// carry out of each addition is computed from the value the atomic returned,
// so the final pair is the exact sum whatever the order.
inline void fixed_add(device atomic_uint* pair, int64 q) {
  if (q == 0) return;
  const uint64 u = uint64(q);
  const uint lo = uint(u);
  const uint hi = uint(u >> 32);
  const uint old = atomic_fetch_add_explicit(&pair[0], lo, memory_order_relaxed);
  const uint carry = (old + lo < old) ? 1u : 0u;
  const uint high = hi + carry;
  if (high != 0u) atomic_fetch_add_explicit(&pair[1], high, memory_order_relaxed);
}

template <int D, int F, typename T>
inline void forward(const device float* inputs, const device T* table, device T* encoded, constant Params& p,
                    uint gid, uint grid_size) {
  const int num_levels = p.num_levels;
  if (p.num_points <= 0) return;
  LevelPointCursor at;
  for (at.start(gid, grid_size, p.num_points); at.level < num_levels; at.next()) {
    const int level = at.level;
    const int64 i = at.point;
    const LevelGeometry g = hash_grid::params_level(p, level);
    const int64 offset = p.level_offsets[level];
    float out[F];
    for (int f = 0; f < F; ++f) out[f] = 0.0f;
    float used[D], mask[D];
    if (prepare_point<D>(inputs + i * D, p.out_of_range, used, mask)) {
      uint32 cell[D], rows[1 << D];
      float w[D], dw[D], weights[1 << D];
      locate_point<D>(used, g.scale, p.interpolation, cell, w, dw);
      hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
      hash_grid::interpolate_corners<D, F, T>(table + offset * F, rows, weights, out);
    }
    device T* o = encoded + (i * num_levels + level) * F;
    for (int f = 0; f < F; ++f) o[f] = T(out[f]);
  }
}

// Shared body of the two table-gradient kernels: calls add(flat_index, value)
// for each corner and feature of each valid (point, level).
template <int D, int F, typename T, typename Add>
inline void scatter(const device T* grad_encoded, const device float* inputs, constant Params& p, uint gid,
                    uint grid_size, thread const Add& add) {
  const int num_levels = p.num_levels;
  if (p.num_points <= 0) return;
  LevelPointCursor at;
  for (at.start(gid, grid_size, p.num_points); at.level < num_levels; at.next()) {
    const int level = at.level;
    const int64 i = at.point;
    float used[D], mask[D];
    if (!prepare_point<D>(inputs + i * D, p.out_of_range, used, mask)) continue;
    const LevelGeometry g = hash_grid::params_level(p, level);
    const int64 offset = p.level_offsets[level];
    float dy[F];
    const device T* dyp = grad_encoded + (i * num_levels + level) * F;
    for (int f = 0; f < F; ++f) dy[f] = float(dyp[f]);
    uint32 cell[D], rows[1 << D];
    float w[D], dw[D], weights[1 << D];
    locate_point<D>(used, g.scale, p.interpolation, cell, w, dw);
    hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
    for (int c = 0; c < (1 << D); ++c) {
      const int64 base = (offset + int64(rows[c])) * F;
      for (int f = 0; f < F; ++f) add(base + f, weights[c] * dy[f]);
    }
  }
}

struct AtomicFloatAdd {
  device atomic_float* sums;
  void operator()(int64 k, float v) const { atomic_fetch_add_explicit(&sums[k], v, memory_order_relaxed); }
};

struct FixedAdd {
  device atomic_uint* pairs;
  float scale;
  void operator()(int64 k, float v) const { fixed_add(pairs + 2 * k, int64(metal::rint(v * scale))); }
};

template <int D, int F, typename T>
inline void table_grad(const device T* grad_encoded, const device float* inputs, device atomic_float* sums,
                       constant Params& p, uint gid, uint grid_size) {
  AtomicFloatAdd add;
  add.sums = sums;
  scatter<D, F, T>(grad_encoded, inputs, p, gid, grid_size, add);
}

template <int D, int F, typename T>
inline void table_grad_fixed(const device T* grad_encoded, const device float* inputs, device atomic_uint* pairs,
                             const device uint* max_abs_bits, constant Params& p, uint gid, uint grid_size) {
  FixedAdd add;
  add.pairs = pairs;
  float inv_scale;
  fixed_scale(max_abs_bits[0], p.num_points, &add.scale, &inv_scale);
  scatter<D, F, T>(grad_encoded, inputs, p, gid, grid_size, add);
}

template <int D, int F, typename T>
inline void input_grad(const device T* grad_encoded, const device float* inputs, const device T* table,
                       device float* grad_inputs, constant Params& p, uint gid, uint grid_size) {
  const int num_levels = p.num_levels;
  for (int64 i = gid; i < p.num_points; i += grid_size) {
    float dx[D];
    for (int d = 0; d < D; ++d) dx[d] = 0.0f;
    float used[D], mask[D];
    if (prepare_point<D>(inputs + i * D, p.out_of_range, used, mask)) {
      for (int level = 0; level < num_levels; ++level) {
        const LevelGeometry g = hash_grid::params_level(p, level);
        float dy[F];
        const device T* dyp = grad_encoded + (i * num_levels + level) * F;
        for (int f = 0; f < F; ++f) dy[f] = float(dyp[f]);
        uint32 cell[D], rows[1 << D];
        float w[D], dw[D], weights[1 << D];
        locate_point<D>(used, g.scale, p.interpolation, cell, w, dw);
        hash_grid::cell_corners<D>(cell, w, g.resolution, g.entries, g.hashed, rows, weights);
        hash_grid::accumulate_input_gradient_corners<D, F, T>(table + p.level_offsets[level] * F, rows, g.scale, w, dw, dy, dx);
      }
      for (int d = 0; d < D; ++d) dx[d] *= mask[d];
    }
    for (int d = 0; d < D; ++d) grad_inputs[i * D + d] = dx[d];
  }
}

}  // namespace hash_grid_metal
}  // namespace mo

// ---- entry points ------------------------------------------------------------------------
// Templates over (D, F, T), instantiated once per host name below.

template <int D, int F, typename T>
[[kernel]] void hash_encode_forward(const device float* inputs [[buffer(mo::kHashEncodeInputs)]],
                                    const device T* table [[buffer(mo::kHashEncodeTable)]],
                                    device T* encoded [[buffer(mo::kHashEncodeEncoded)]],
                                    constant mo::hash_grid::Params& p [[buffer(mo::kHashEncodeParams)]],
                                    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  mo::hash_grid_metal::forward<D, F, T>(inputs, table, encoded, p, gid, grid_size);
}

template <int D, int F, typename T>
[[kernel]] void hash_encode_table_grad(const device T* grad_encoded [[buffer(mo::kHashEncodeScatterDy)]],
                                       const device float* inputs [[buffer(mo::kHashEncodeScatterInputs)]],
                                       device atomic_float* sums [[buffer(mo::kHashEncodeScatterSums)]],
                                       constant mo::hash_grid::Params& p [[buffer(mo::kHashEncodeScatterParams)]],
                                       uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  mo::hash_grid_metal::table_grad<D, F, T>(grad_encoded, inputs, sums, p, gid, grid_size);
}

template <int D, int F, typename T>
[[kernel]] void hash_encode_table_grad_fixed(const device T* grad_encoded [[buffer(mo::kHashEncodeScatterDy)]],
                                             const device float* inputs [[buffer(mo::kHashEncodeScatterInputs)]],
                                             device atomic_uint* pairs [[buffer(mo::kHashEncodeScatterSums)]],
                                             constant mo::hash_grid::Params& p [[buffer(mo::kHashEncodeScatterParams)]],
                                             const device uint* max_abs_bits [[buffer(mo::kHashEncodeScatterMaxBits)]],
                                             uint gid [[thread_position_in_grid]],
                                             uint grid_size [[threads_per_grid]]) {
  mo::hash_grid_metal::table_grad_fixed<D, F, T>(grad_encoded, inputs, pairs, max_abs_bits, p, gid, grid_size);
}

template <int D, int F, typename T>
[[kernel]] void hash_encode_input_grad(const device T* grad_encoded [[buffer(mo::kHashEncodeInputGradDy)]],
                                       const device float* inputs [[buffer(mo::kHashEncodeInputGradInputs)]],
                                       const device T* table [[buffer(mo::kHashEncodeInputGradTable)]],
                                       device float* grad_inputs [[buffer(mo::kHashEncodeInputGradOut)]],
                                       constant mo::hash_grid::Params& p [[buffer(mo::kHashEncodeInputGradParams)]],
                                       uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  mo::hash_grid_metal::input_grad<D, F, T>(grad_encoded, inputs, table, grad_inputs, p, gid, grid_size);
}

template <typename W>
[[kernel]] void hash_encode_zero(device W* words [[buffer(mo::kHashEncodeZeroWords)]],
                                 constant mo::HashEncodeCountParams& p [[buffer(mo::kHashEncodeZeroCount)]],
                                 uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  for (mo::int64 k = gid; k < p.count; k += grid_size) words[k] = W(0);
}

// max |x| as float bits into bits[0] (must start at 0); NaN counts as +inf.
template <typename T>
[[kernel]] void hash_encode_max_abs(const device T* x [[buffer(mo::kHashEncodeMaxAbsX)]],
                                    device atomic_uint* bits [[buffer(mo::kHashEncodeMaxAbsBits)]],
                                    constant mo::HashEncodeCountParams& p [[buffer(mo::kHashEncodeMaxAbsCount)]],
                                    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  float m = 0.0f;
  for (mo::int64 k = gid; k < p.count; k += grid_size) {
    const float v = metal::fabs(float(x[k]));
    m = metal::isnan(v) ? INFINITY : metal::fmax(m, v);
  }
  if (m > 0.0f) atomic_fetch_max_explicit(&bits[0], as_type<uint>(m), memory_order_relaxed);
}

// table gradient = (lo | hi << 32) as int64 * 2^-k.
template <typename T>
[[kernel]] void hash_encode_fixed_to_table(const device uint* pairs [[buffer(mo::kHashEncodeFixedPairs)]],
                                           const device uint* max_abs_bits [[buffer(mo::kHashEncodeFixedMaxBits)]],
                                           device T* out [[buffer(mo::kHashEncodeFixedOut)]],
                                           constant mo::HashEncodeCountParams& p [[buffer(mo::kHashEncodeFixedCount)]],
                                           uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  float scale, inv_scale;
  mo::hash_grid_metal::fixed_scale(max_abs_bits[0], p.num_points, &scale, &inv_scale);
  for (mo::int64 k = gid; k < p.count; k += grid_size) {
    const mo::uint64 u = mo::uint64(pairs[2 * k]) | (mo::uint64(pairs[2 * k + 1]) << 32);
    out[k] = T(float(mo::int64(u)) * inv_scale);
  }
}

template <typename T>
[[kernel]] void hash_encode_float_to(const device float* in [[buffer(mo::kHashEncodeToHalfIn)]],
                                     device T* out [[buffer(mo::kHashEncodeToHalfOut)]],
                                     constant mo::HashEncodeCountParams& p [[buffer(mo::kHashEncodeToHalfCount)]],
                                     uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  for (mo::int64 k = gid; k < p.count; k += grid_size) out[k] = T(in[k]);
}

// ---- instantiations: host name <kind>_d<D>_f<F>_<TN>, the names the plans of
// kernels/hash_encode/hash_encode_metal.cc ask for.

template [[host_name("hash_encode_forward_d1_f1_float32")]] [[kernel]] decltype(hash_encode_forward<1, 1, float>) hash_encode_forward<1, 1, float>;
template [[host_name("hash_encode_forward_d1_f2_float32")]] [[kernel]] decltype(hash_encode_forward<1, 2, float>) hash_encode_forward<1, 2, float>;
template [[host_name("hash_encode_forward_d1_f4_float32")]] [[kernel]] decltype(hash_encode_forward<1, 4, float>) hash_encode_forward<1, 4, float>;
template [[host_name("hash_encode_forward_d1_f8_float32")]] [[kernel]] decltype(hash_encode_forward<1, 8, float>) hash_encode_forward<1, 8, float>;
template [[host_name("hash_encode_forward_d2_f1_float32")]] [[kernel]] decltype(hash_encode_forward<2, 1, float>) hash_encode_forward<2, 1, float>;
template [[host_name("hash_encode_forward_d2_f2_float32")]] [[kernel]] decltype(hash_encode_forward<2, 2, float>) hash_encode_forward<2, 2, float>;
template [[host_name("hash_encode_forward_d2_f4_float32")]] [[kernel]] decltype(hash_encode_forward<2, 4, float>) hash_encode_forward<2, 4, float>;
template [[host_name("hash_encode_forward_d2_f8_float32")]] [[kernel]] decltype(hash_encode_forward<2, 8, float>) hash_encode_forward<2, 8, float>;
template [[host_name("hash_encode_forward_d3_f1_float32")]] [[kernel]] decltype(hash_encode_forward<3, 1, float>) hash_encode_forward<3, 1, float>;
template [[host_name("hash_encode_forward_d3_f2_float32")]] [[kernel]] decltype(hash_encode_forward<3, 2, float>) hash_encode_forward<3, 2, float>;
template [[host_name("hash_encode_forward_d3_f4_float32")]] [[kernel]] decltype(hash_encode_forward<3, 4, float>) hash_encode_forward<3, 4, float>;
template [[host_name("hash_encode_forward_d3_f8_float32")]] [[kernel]] decltype(hash_encode_forward<3, 8, float>) hash_encode_forward<3, 8, float>;
template [[host_name("hash_encode_forward_d4_f1_float32")]] [[kernel]] decltype(hash_encode_forward<4, 1, float>) hash_encode_forward<4, 1, float>;
template [[host_name("hash_encode_forward_d4_f2_float32")]] [[kernel]] decltype(hash_encode_forward<4, 2, float>) hash_encode_forward<4, 2, float>;
template [[host_name("hash_encode_forward_d4_f4_float32")]] [[kernel]] decltype(hash_encode_forward<4, 4, float>) hash_encode_forward<4, 4, float>;
template [[host_name("hash_encode_forward_d4_f8_float32")]] [[kernel]] decltype(hash_encode_forward<4, 8, float>) hash_encode_forward<4, 8, float>;
template [[host_name("hash_encode_table_grad_d1_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad<1, 1, float>) hash_encode_table_grad<1, 1, float>;
template [[host_name("hash_encode_table_grad_d1_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad<1, 2, float>) hash_encode_table_grad<1, 2, float>;
template [[host_name("hash_encode_table_grad_d1_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad<1, 4, float>) hash_encode_table_grad<1, 4, float>;
template [[host_name("hash_encode_table_grad_d1_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad<1, 8, float>) hash_encode_table_grad<1, 8, float>;
template [[host_name("hash_encode_table_grad_d2_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad<2, 1, float>) hash_encode_table_grad<2, 1, float>;
template [[host_name("hash_encode_table_grad_d2_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad<2, 2, float>) hash_encode_table_grad<2, 2, float>;
template [[host_name("hash_encode_table_grad_d2_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad<2, 4, float>) hash_encode_table_grad<2, 4, float>;
template [[host_name("hash_encode_table_grad_d2_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad<2, 8, float>) hash_encode_table_grad<2, 8, float>;
template [[host_name("hash_encode_table_grad_d3_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad<3, 1, float>) hash_encode_table_grad<3, 1, float>;
template [[host_name("hash_encode_table_grad_d3_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad<3, 2, float>) hash_encode_table_grad<3, 2, float>;
template [[host_name("hash_encode_table_grad_d3_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad<3, 4, float>) hash_encode_table_grad<3, 4, float>;
template [[host_name("hash_encode_table_grad_d3_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad<3, 8, float>) hash_encode_table_grad<3, 8, float>;
template [[host_name("hash_encode_table_grad_d4_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad<4, 1, float>) hash_encode_table_grad<4, 1, float>;
template [[host_name("hash_encode_table_grad_d4_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad<4, 2, float>) hash_encode_table_grad<4, 2, float>;
template [[host_name("hash_encode_table_grad_d4_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad<4, 4, float>) hash_encode_table_grad<4, 4, float>;
template [[host_name("hash_encode_table_grad_d4_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad<4, 8, float>) hash_encode_table_grad<4, 8, float>;
template [[host_name("hash_encode_table_grad_fixed_d1_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 1, float>) hash_encode_table_grad_fixed<1, 1, float>;
template [[host_name("hash_encode_table_grad_fixed_d1_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 2, float>) hash_encode_table_grad_fixed<1, 2, float>;
template [[host_name("hash_encode_table_grad_fixed_d1_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 4, float>) hash_encode_table_grad_fixed<1, 4, float>;
template [[host_name("hash_encode_table_grad_fixed_d1_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 8, float>) hash_encode_table_grad_fixed<1, 8, float>;
template [[host_name("hash_encode_table_grad_fixed_d2_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 1, float>) hash_encode_table_grad_fixed<2, 1, float>;
template [[host_name("hash_encode_table_grad_fixed_d2_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 2, float>) hash_encode_table_grad_fixed<2, 2, float>;
template [[host_name("hash_encode_table_grad_fixed_d2_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 4, float>) hash_encode_table_grad_fixed<2, 4, float>;
template [[host_name("hash_encode_table_grad_fixed_d2_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 8, float>) hash_encode_table_grad_fixed<2, 8, float>;
template [[host_name("hash_encode_table_grad_fixed_d3_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 1, float>) hash_encode_table_grad_fixed<3, 1, float>;
template [[host_name("hash_encode_table_grad_fixed_d3_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 2, float>) hash_encode_table_grad_fixed<3, 2, float>;
template [[host_name("hash_encode_table_grad_fixed_d3_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 4, float>) hash_encode_table_grad_fixed<3, 4, float>;
template [[host_name("hash_encode_table_grad_fixed_d3_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 8, float>) hash_encode_table_grad_fixed<3, 8, float>;
template [[host_name("hash_encode_table_grad_fixed_d4_f1_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 1, float>) hash_encode_table_grad_fixed<4, 1, float>;
template [[host_name("hash_encode_table_grad_fixed_d4_f2_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 2, float>) hash_encode_table_grad_fixed<4, 2, float>;
template [[host_name("hash_encode_table_grad_fixed_d4_f4_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 4, float>) hash_encode_table_grad_fixed<4, 4, float>;
template [[host_name("hash_encode_table_grad_fixed_d4_f8_float32")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 8, float>) hash_encode_table_grad_fixed<4, 8, float>;
template [[host_name("hash_encode_input_grad_d1_f1_float32")]] [[kernel]] decltype(hash_encode_input_grad<1, 1, float>) hash_encode_input_grad<1, 1, float>;
template [[host_name("hash_encode_input_grad_d1_f2_float32")]] [[kernel]] decltype(hash_encode_input_grad<1, 2, float>) hash_encode_input_grad<1, 2, float>;
template [[host_name("hash_encode_input_grad_d1_f4_float32")]] [[kernel]] decltype(hash_encode_input_grad<1, 4, float>) hash_encode_input_grad<1, 4, float>;
template [[host_name("hash_encode_input_grad_d1_f8_float32")]] [[kernel]] decltype(hash_encode_input_grad<1, 8, float>) hash_encode_input_grad<1, 8, float>;
template [[host_name("hash_encode_input_grad_d2_f1_float32")]] [[kernel]] decltype(hash_encode_input_grad<2, 1, float>) hash_encode_input_grad<2, 1, float>;
template [[host_name("hash_encode_input_grad_d2_f2_float32")]] [[kernel]] decltype(hash_encode_input_grad<2, 2, float>) hash_encode_input_grad<2, 2, float>;
template [[host_name("hash_encode_input_grad_d2_f4_float32")]] [[kernel]] decltype(hash_encode_input_grad<2, 4, float>) hash_encode_input_grad<2, 4, float>;
template [[host_name("hash_encode_input_grad_d2_f8_float32")]] [[kernel]] decltype(hash_encode_input_grad<2, 8, float>) hash_encode_input_grad<2, 8, float>;
template [[host_name("hash_encode_input_grad_d3_f1_float32")]] [[kernel]] decltype(hash_encode_input_grad<3, 1, float>) hash_encode_input_grad<3, 1, float>;
template [[host_name("hash_encode_input_grad_d3_f2_float32")]] [[kernel]] decltype(hash_encode_input_grad<3, 2, float>) hash_encode_input_grad<3, 2, float>;
template [[host_name("hash_encode_input_grad_d3_f4_float32")]] [[kernel]] decltype(hash_encode_input_grad<3, 4, float>) hash_encode_input_grad<3, 4, float>;
template [[host_name("hash_encode_input_grad_d3_f8_float32")]] [[kernel]] decltype(hash_encode_input_grad<3, 8, float>) hash_encode_input_grad<3, 8, float>;
template [[host_name("hash_encode_input_grad_d4_f1_float32")]] [[kernel]] decltype(hash_encode_input_grad<4, 1, float>) hash_encode_input_grad<4, 1, float>;
template [[host_name("hash_encode_input_grad_d4_f2_float32")]] [[kernel]] decltype(hash_encode_input_grad<4, 2, float>) hash_encode_input_grad<4, 2, float>;
template [[host_name("hash_encode_input_grad_d4_f4_float32")]] [[kernel]] decltype(hash_encode_input_grad<4, 4, float>) hash_encode_input_grad<4, 4, float>;
template [[host_name("hash_encode_input_grad_d4_f8_float32")]] [[kernel]] decltype(hash_encode_input_grad<4, 8, float>) hash_encode_input_grad<4, 8, float>;
template [[host_name("hash_encode_forward_d1_f1_float16")]] [[kernel]] decltype(hash_encode_forward<1, 1, half>) hash_encode_forward<1, 1, half>;
template [[host_name("hash_encode_forward_d1_f2_float16")]] [[kernel]] decltype(hash_encode_forward<1, 2, half>) hash_encode_forward<1, 2, half>;
template [[host_name("hash_encode_forward_d1_f4_float16")]] [[kernel]] decltype(hash_encode_forward<1, 4, half>) hash_encode_forward<1, 4, half>;
template [[host_name("hash_encode_forward_d1_f8_float16")]] [[kernel]] decltype(hash_encode_forward<1, 8, half>) hash_encode_forward<1, 8, half>;
template [[host_name("hash_encode_forward_d2_f1_float16")]] [[kernel]] decltype(hash_encode_forward<2, 1, half>) hash_encode_forward<2, 1, half>;
template [[host_name("hash_encode_forward_d2_f2_float16")]] [[kernel]] decltype(hash_encode_forward<2, 2, half>) hash_encode_forward<2, 2, half>;
template [[host_name("hash_encode_forward_d2_f4_float16")]] [[kernel]] decltype(hash_encode_forward<2, 4, half>) hash_encode_forward<2, 4, half>;
template [[host_name("hash_encode_forward_d2_f8_float16")]] [[kernel]] decltype(hash_encode_forward<2, 8, half>) hash_encode_forward<2, 8, half>;
template [[host_name("hash_encode_forward_d3_f1_float16")]] [[kernel]] decltype(hash_encode_forward<3, 1, half>) hash_encode_forward<3, 1, half>;
template [[host_name("hash_encode_forward_d3_f2_float16")]] [[kernel]] decltype(hash_encode_forward<3, 2, half>) hash_encode_forward<3, 2, half>;
template [[host_name("hash_encode_forward_d3_f4_float16")]] [[kernel]] decltype(hash_encode_forward<3, 4, half>) hash_encode_forward<3, 4, half>;
template [[host_name("hash_encode_forward_d3_f8_float16")]] [[kernel]] decltype(hash_encode_forward<3, 8, half>) hash_encode_forward<3, 8, half>;
template [[host_name("hash_encode_forward_d4_f1_float16")]] [[kernel]] decltype(hash_encode_forward<4, 1, half>) hash_encode_forward<4, 1, half>;
template [[host_name("hash_encode_forward_d4_f2_float16")]] [[kernel]] decltype(hash_encode_forward<4, 2, half>) hash_encode_forward<4, 2, half>;
template [[host_name("hash_encode_forward_d4_f4_float16")]] [[kernel]] decltype(hash_encode_forward<4, 4, half>) hash_encode_forward<4, 4, half>;
template [[host_name("hash_encode_forward_d4_f8_float16")]] [[kernel]] decltype(hash_encode_forward<4, 8, half>) hash_encode_forward<4, 8, half>;
template [[host_name("hash_encode_table_grad_d1_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad<1, 1, half>) hash_encode_table_grad<1, 1, half>;
template [[host_name("hash_encode_table_grad_d1_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad<1, 2, half>) hash_encode_table_grad<1, 2, half>;
template [[host_name("hash_encode_table_grad_d1_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad<1, 4, half>) hash_encode_table_grad<1, 4, half>;
template [[host_name("hash_encode_table_grad_d1_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad<1, 8, half>) hash_encode_table_grad<1, 8, half>;
template [[host_name("hash_encode_table_grad_d2_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad<2, 1, half>) hash_encode_table_grad<2, 1, half>;
template [[host_name("hash_encode_table_grad_d2_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad<2, 2, half>) hash_encode_table_grad<2, 2, half>;
template [[host_name("hash_encode_table_grad_d2_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad<2, 4, half>) hash_encode_table_grad<2, 4, half>;
template [[host_name("hash_encode_table_grad_d2_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad<2, 8, half>) hash_encode_table_grad<2, 8, half>;
template [[host_name("hash_encode_table_grad_d3_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad<3, 1, half>) hash_encode_table_grad<3, 1, half>;
template [[host_name("hash_encode_table_grad_d3_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad<3, 2, half>) hash_encode_table_grad<3, 2, half>;
template [[host_name("hash_encode_table_grad_d3_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad<3, 4, half>) hash_encode_table_grad<3, 4, half>;
template [[host_name("hash_encode_table_grad_d3_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad<3, 8, half>) hash_encode_table_grad<3, 8, half>;
template [[host_name("hash_encode_table_grad_d4_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad<4, 1, half>) hash_encode_table_grad<4, 1, half>;
template [[host_name("hash_encode_table_grad_d4_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad<4, 2, half>) hash_encode_table_grad<4, 2, half>;
template [[host_name("hash_encode_table_grad_d4_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad<4, 4, half>) hash_encode_table_grad<4, 4, half>;
template [[host_name("hash_encode_table_grad_d4_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad<4, 8, half>) hash_encode_table_grad<4, 8, half>;
template [[host_name("hash_encode_table_grad_fixed_d1_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 1, half>) hash_encode_table_grad_fixed<1, 1, half>;
template [[host_name("hash_encode_table_grad_fixed_d1_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 2, half>) hash_encode_table_grad_fixed<1, 2, half>;
template [[host_name("hash_encode_table_grad_fixed_d1_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 4, half>) hash_encode_table_grad_fixed<1, 4, half>;
template [[host_name("hash_encode_table_grad_fixed_d1_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<1, 8, half>) hash_encode_table_grad_fixed<1, 8, half>;
template [[host_name("hash_encode_table_grad_fixed_d2_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 1, half>) hash_encode_table_grad_fixed<2, 1, half>;
template [[host_name("hash_encode_table_grad_fixed_d2_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 2, half>) hash_encode_table_grad_fixed<2, 2, half>;
template [[host_name("hash_encode_table_grad_fixed_d2_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 4, half>) hash_encode_table_grad_fixed<2, 4, half>;
template [[host_name("hash_encode_table_grad_fixed_d2_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<2, 8, half>) hash_encode_table_grad_fixed<2, 8, half>;
template [[host_name("hash_encode_table_grad_fixed_d3_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 1, half>) hash_encode_table_grad_fixed<3, 1, half>;
template [[host_name("hash_encode_table_grad_fixed_d3_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 2, half>) hash_encode_table_grad_fixed<3, 2, half>;
template [[host_name("hash_encode_table_grad_fixed_d3_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 4, half>) hash_encode_table_grad_fixed<3, 4, half>;
template [[host_name("hash_encode_table_grad_fixed_d3_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<3, 8, half>) hash_encode_table_grad_fixed<3, 8, half>;
template [[host_name("hash_encode_table_grad_fixed_d4_f1_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 1, half>) hash_encode_table_grad_fixed<4, 1, half>;
template [[host_name("hash_encode_table_grad_fixed_d4_f2_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 2, half>) hash_encode_table_grad_fixed<4, 2, half>;
template [[host_name("hash_encode_table_grad_fixed_d4_f4_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 4, half>) hash_encode_table_grad_fixed<4, 4, half>;
template [[host_name("hash_encode_table_grad_fixed_d4_f8_float16")]] [[kernel]] decltype(hash_encode_table_grad_fixed<4, 8, half>) hash_encode_table_grad_fixed<4, 8, half>;
template [[host_name("hash_encode_input_grad_d1_f1_float16")]] [[kernel]] decltype(hash_encode_input_grad<1, 1, half>) hash_encode_input_grad<1, 1, half>;
template [[host_name("hash_encode_input_grad_d1_f2_float16")]] [[kernel]] decltype(hash_encode_input_grad<1, 2, half>) hash_encode_input_grad<1, 2, half>;
template [[host_name("hash_encode_input_grad_d1_f4_float16")]] [[kernel]] decltype(hash_encode_input_grad<1, 4, half>) hash_encode_input_grad<1, 4, half>;
template [[host_name("hash_encode_input_grad_d1_f8_float16")]] [[kernel]] decltype(hash_encode_input_grad<1, 8, half>) hash_encode_input_grad<1, 8, half>;
template [[host_name("hash_encode_input_grad_d2_f1_float16")]] [[kernel]] decltype(hash_encode_input_grad<2, 1, half>) hash_encode_input_grad<2, 1, half>;
template [[host_name("hash_encode_input_grad_d2_f2_float16")]] [[kernel]] decltype(hash_encode_input_grad<2, 2, half>) hash_encode_input_grad<2, 2, half>;
template [[host_name("hash_encode_input_grad_d2_f4_float16")]] [[kernel]] decltype(hash_encode_input_grad<2, 4, half>) hash_encode_input_grad<2, 4, half>;
template [[host_name("hash_encode_input_grad_d2_f8_float16")]] [[kernel]] decltype(hash_encode_input_grad<2, 8, half>) hash_encode_input_grad<2, 8, half>;
template [[host_name("hash_encode_input_grad_d3_f1_float16")]] [[kernel]] decltype(hash_encode_input_grad<3, 1, half>) hash_encode_input_grad<3, 1, half>;
template [[host_name("hash_encode_input_grad_d3_f2_float16")]] [[kernel]] decltype(hash_encode_input_grad<3, 2, half>) hash_encode_input_grad<3, 2, half>;
template [[host_name("hash_encode_input_grad_d3_f4_float16")]] [[kernel]] decltype(hash_encode_input_grad<3, 4, half>) hash_encode_input_grad<3, 4, half>;
template [[host_name("hash_encode_input_grad_d3_f8_float16")]] [[kernel]] decltype(hash_encode_input_grad<3, 8, half>) hash_encode_input_grad<3, 8, half>;
template [[host_name("hash_encode_input_grad_d4_f1_float16")]] [[kernel]] decltype(hash_encode_input_grad<4, 1, half>) hash_encode_input_grad<4, 1, half>;
template [[host_name("hash_encode_input_grad_d4_f2_float16")]] [[kernel]] decltype(hash_encode_input_grad<4, 2, half>) hash_encode_input_grad<4, 2, half>;
template [[host_name("hash_encode_input_grad_d4_f4_float16")]] [[kernel]] decltype(hash_encode_input_grad<4, 4, half>) hash_encode_input_grad<4, 4, half>;
template [[host_name("hash_encode_input_grad_d4_f8_float16")]] [[kernel]] decltype(hash_encode_input_grad<4, 8, half>) hash_encode_input_grad<4, 8, half>;
template [[host_name("hash_encode_zero_u32")]] [[kernel]] decltype(hash_encode_zero<int>) hash_encode_zero<int>;
template [[host_name("hash_encode_float_to_half")]] [[kernel]] decltype(hash_encode_float_to<half>) hash_encode_float_to<half>;
template [[host_name("hash_encode_max_abs_float32")]] [[kernel]] decltype(hash_encode_max_abs<float>) hash_encode_max_abs<float>;
template [[host_name("hash_encode_max_abs_float16")]] [[kernel]] decltype(hash_encode_max_abs<half>) hash_encode_max_abs<half>;
template [[host_name("hash_encode_fixed_to_table_float32")]] [[kernel]] decltype(hash_encode_fixed_to_table<float>) hash_encode_fixed_to_table<float>;
template [[host_name("hash_encode_fixed_to_table_float16")]] [[kernel]] decltype(hash_encode_fixed_to_table<half>) hash_encode_fixed_to_table<half>;
