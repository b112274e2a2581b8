// HashEncode: the multiresolution hash encoding of instant-NGP (tiny-cuda-nn's
// "Hash" grid), its gradients and second derivatives, and the size of its
// table. This header is the op's one description shared by every backend: the
// shaders' arguments and buffer indices (the formulas are
// kernels/common/hash_grid.h's), the ops' declarations (their attribute lists,
// MO_HASH_ENCODE_ATTRS and the lists composed from it) and, in host code, the
// attributes and checks that follow from them, the Metal plans' signatures,
// the CUDA launchers', the CPU kernels' bodies (MO_CPU_BODIES) and the
// TensorFlow kernel classes (MO_TF_KERNEL). The op's files (docs/ADDING_AN_OP.md):
//   hash_encode_op.cc     REGISTER_OP                 hash_encode_cpu.cc    CPU kernels, XLA host handlers
//   hash_encode.cu.cc     CUDA kernels, launchers     hash_encode_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   hash_encode.metal     Metal shaders               hash_encode_metal.cc  Metal plans, tensorflow-metal glue
//   hash_encode_xla.cc    XLA op kernels
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of the helper kernels (zero, max_abs, fixed_to_table, float_to_half).
struct HashEncodeCountParams {
  int64 count;       // elements to visit
  int64 num_points;  // N (fixed_to_table's scale)
};

enum HashEncodeBuffers {
  // forward: encoded = the grid's features of inputs
  kHashEncodeInputs = 0,
  kHashEncodeTable = 1,
  kHashEncodeEncoded = 2,
  kHashEncodeParams = 3,  // hash_grid::Params
  // table_grad (atomic float sums) and table_grad_fixed (64-bit fixed-point pairs)
  kHashEncodeScatterDy = 0,
  kHashEncodeScatterInputs = 1,
  kHashEncodeScatterSums = 2,
  kHashEncodeScatterParams = 3,   // hash_grid::Params
  kHashEncodeScatterMaxBits = 4,  // table_grad_fixed: max |dy| as float bits
  // input_grad
  kHashEncodeInputGradDy = 0,
  kHashEncodeInputGradInputs = 1,
  kHashEncodeInputGradTable = 2,
  kHashEncodeInputGradOut = 3,
  kHashEncodeInputGradParams = 4,  // hash_grid::Params
  // zero (32-bit words)
  kHashEncodeZeroWords = 0,
  kHashEncodeZeroCount = 1,  // HashEncodeCountParams
  // max_abs
  kHashEncodeMaxAbsX = 0,
  kHashEncodeMaxAbsBits = 1,
  kHashEncodeMaxAbsCount = 2,  // HashEncodeCountParams
  // fixed_to_table
  kHashEncodeFixedPairs = 0,
  kHashEncodeFixedMaxBits = 1,
  kHashEncodeFixedOut = 2,
  kHashEncodeFixedCount = 3,  // HashEncodeCountParams
  // float_to_half
  kHashEncodeToHalfIn = 0,
  kHashEncodeToHalfOut = 1,
  kHashEncodeToHalfCount = 2,  // HashEncodeCountParams
};

}  // namespace mo

// ---- The ops' declarations (kernels/spec/op_attrs.h) -------------------------------
// The grid: every hash-grid op's. TensorFlow's types only: the grid's own
// checks (ranges, the finest level's resolution) are Grid()'s, below, which
// the ops' ReadAttrs run after the declared reads.
#define MO_HASH_GRID_ATTRS(ATTR)                                                              \
  ATTR(num_levels, RequiredInt, INT32_MIN, INT32_MAX)                                         \
  ATTR(log2_hashmap_size, RequiredInt, INT32_MIN, INT32_MAX)                                  \
  ATTR(base_resolution, RequiredInt, INT32_MIN, INT32_MAX)                                    \
  ATTR(per_level_scale, RequiredFloat, -INFINITY, INFINITY)
// MetalOpsHashEncode(inputs, table) -> encoded and
// MetalOpsHashEncodeGradGrad(grad_grad_inputs, grad_encoded, inputs, table)
// -> (grad_table, grad_grad_encoded), T in {float, half}.
#define MO_HASH_ENCODE_ATTRS(ATTR)                                                            \
  MO_HASH_GRID_ATTRS(ATTR)                                                                    \
  ATTR(interpolation, Enum, ::mo::hash_grid::kLinear, "linear", "smoothstep")                 \
  ATTR(out_of_range, Enum, ::mo::hash_grid::kClamp, "clamp", "wrap", "zero")
// MetalOpsHashEncodeGrad(grad_encoded, inputs, table) -> (grad_table, grad_inputs).
#define MO_HASH_ENCODE_GRAD_ATTRS(ATTR)                                                       \
  MO_HASH_ENCODE_ATTRS(ATTR)                                                                  \
  ATTR(compute_table_grad, Bool, true) ATTR(compute_input_grad, Bool, true) ATTR(deterministic, Bool, false)
// MetalOpsHashGridOffsets() -> offsets [num_levels + 1] of a grid of input_dim dimensions.
#define MO_HASH_GRID_OFFSETS_ATTRS(ATTR) ATTR(input_dim, RequiredInt, INT32_MIN, INT32_MAX) MO_HASH_GRID_ATTRS(ATTR)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cmath>    // host
#include <cstdint>  // host
#include <string>   // host

#include "kernels/common/hash_grid.h"  // host
#include "kernels/spec/op_attrs.h"     // host

// The declared attributes, one struct per list (Attrs, ReadAttrs, VisitAttrs).
namespace mo::hash_encode::declared_encode {
MO_DECLARE_ATTRS("HashEncode", MO_HASH_ENCODE_ATTRS);
}
namespace mo::hash_encode::declared_grad {
MO_DECLARE_ATTRS("HashEncode", MO_HASH_ENCODE_GRAD_ATTRS);
}
namespace mo::hash_encode::declared_offsets {
MO_DECLARE_ATTRS("HashEncode", MO_HASH_GRID_OFFSETS_ATTRS);
}

namespace mo {
namespace hash_encode {

// The attributes of MetalOpsHashEncode and MetalOpsHashEncodeGradGrad
// (Attrs), MetalOpsHashEncodeGrad (GradAttrs) and MetalOpsHashGridOffsets
// (OffsetsAttrs): the declared members; ReadAttrs below reads them and checks
// the grid (the XLA call's attributes are the declared ones, VisitAttrs).
struct Attrs : declared_encode::Attrs {};
struct GradAttrs : declared_grad::Attrs {};
struct OffsetsAttrs : declared_offsets::Attrs {};

// The grid's checks, every op's (a: any of the Attrs above).
template <typename A>
Result Grid(const A& a) {
  if (a.num_levels < 1 || a.num_levels > hash_grid::kMaxLevels) {
    return Invalid("num_levels must be in [1, ", int(hash_grid::kMaxLevels), "], got ", a.num_levels);
  }
  if (a.log2_hashmap_size < hash_grid::kMinLog2HashmapSize || a.log2_hashmap_size > hash_grid::kMaxLog2HashmapSize) {
    return Invalid("log2_hashmap_size must be in [", int(hash_grid::kMinLog2HashmapSize), ", ",
                   int(hash_grid::kMaxLog2HashmapSize), "], got ", a.log2_hashmap_size);
  }
  if (a.base_resolution < 1) return Invalid("base_resolution must be >= 1, got ", a.base_resolution);
  if (!(a.per_level_scale >= 1.0f) || std::isinf(a.per_level_scale)) {
    return Invalid("per_level_scale must be finite and >= 1, got ", a.per_level_scale);
  }
  // The finest level's vertex coordinates must fit the uint32 cell arithmetic.
  const float finest =
      hash_grid::level_scale(a.num_levels - 1, log2_f(a.per_level_scale), uint32(a.base_resolution));
  if (!(finest < 2147483520.0f)) {
    return Invalid("resolution of the finest level (base_resolution * per_level_scale^(num_levels-1) = ",
                   finest + 1.0f, ") must stay below 2^31: reduce base_resolution, per_level_scale or num_levels");
  }
  return Ok();
}

// Reads (the declaration's reads) and checks the attributes: the one
// attribute read of the shape functions, the kernel classes, the Metal kernels
// and XLA's handlers (kernels/spec/checks_tf.h ReadAttrsOf,
// kernels/xla/xla_ffi_attrs.h).
template <typename Get>
Result ReadAttrs(Get&& get, Attrs* a) {
  MO_RETURN_IF_INVALID(declared_encode::ReadAttrs(get, a));
  return Grid(*a);
}

template <typename Get>
Result ReadAttrs(Get&& get, GradAttrs* a) {
  MO_RETURN_IF_INVALID(declared_grad::ReadAttrs(get, a));
  return Grid(*a);
}

template <typename Get>
Result ReadAttrs(Get&& get, OffsetsAttrs* a) {
  MO_RETURN_IF_INVALID(declared_offsets::ReadAttrs(get, a));
  if (a->input_dim < 1 || a->input_dim > hash_grid::kMaxDims) {
    return Invalid("input_dim must be in [1, 4], got ", a->input_dim);
  }
  return Grid(*a);
}

// Table rows P of the grid (and the level offsets, offsets[0..num_levels]).
template <typename A>
int64_t GridRows(int dims, const A& a, int64_t* offsets) {
  return hash_grid::level_offsets(dims, a.num_levels, a.log2_hashmap_size, log2_f(a.per_level_scale),
                                  uint32(a.base_resolution), offsets);
}

// The kernels' Params for a grid, via hash_grid::make_params.
template <typename A>
hash_grid::Params MakeParams(const A& a, int dims, int64_t num_points) {
  hash_grid::Params p;
  hash_grid::make_params(dims, num_points, a.num_levels, a.log2_hashmap_size, uint32(a.base_resolution),
                         a.per_level_scale, a.interpolation, a.out_of_range, &p);
  return p;
}

// The pieces of InputsAndTable, also checked alone where a shape is partly known.
inline Result InputDim(int64_t d, const Dims& inputs) {
  if (d < 1 || d > hash_grid::kMaxDims) {
    return Invalid("inputs must be [N, D] with D in [1, 4], got D = ", d, " (shape ", ShapeString(inputs), ")");
  }
  return Ok();
}

inline Result Features(int64_t f) {
  if (f != 1 && f != 2 && f != 4 && f != 8) return Invalid("table must be [P, F] with F in {1, 2, 4, 8}, got F = ", f);
  return Ok();
}

template <typename A>
Result RowsMatch(const A& a, int64_t d, int64_t rows, int64_t expected) {
  if (rows != expected) {
    return Invalid("table has ", rows, " rows but the hash grid needs ", expected, " (hash_grid_size(input_dim=", d,
                   ", num_levels=", a.num_levels, ", log2_hashmap_size=", a.log2_hashmap_size,
                   ", base_resolution=", a.base_resolution, ", per_level_scale=", a.per_level_scale, "))");
  }
  return Ok();
}

// The table's row count against the grid's, where only shapes are known (shape functions).
template <typename A>
Result TableRows(const A& a, int64_t d, int64_t rows, int64_t* expected) {
  int64_t offsets[hash_grid::kMaxLevels + 1];
  *expected = GridRows(int(d), a, offsets);
  return RowsMatch(a, d, rows, *expected);
}

// inputs [N, D] and table [P, F] against the grid; sets D, F, P and the
// grid's Params for the kernels: the one geometry computation of a call.
template <typename A>
Result InputsAndTable(const A& a, const Dims& inputs, const Dims& table, int* dims, int* features,
                             int64_t* rows, hash_grid::Params* params) {
  if (inputs.size() != 2) return Invalid("inputs must be a rank-2 tensor [N, D], got shape ", ShapeString(inputs));
  MO_RETURN_IF_INVALID(InputDim(inputs[1], inputs));
  if (table.size() != 2) return Invalid("table must be a rank-2 tensor [P, F], got shape ", ShapeString(table));
  MO_RETURN_IF_INVALID(Features(table[1]));
  *params = MakeParams(a, int(inputs[1]), inputs[0]);
  *rows = params->level_offsets[a.num_levels];
  MO_RETURN_IF_INVALID(RowsMatch(a, inputs[1], table[0], *rows));
  *dims = int(inputs[1]);
  *features = int(table[1]);
  return Ok();
}

// D, F, P and the grid's Params, as InputsAndTable sets them.
struct TableGeometry {
  int dims = 0, features = 0;
  int64_t rows = 0;
  hash_grid::Params params;
};

template <typename A>
Result InputsAndTable(const A& a, const Dims& inputs, const Dims& table, TableGeometry* g) {
  return InputsAndTable(a, inputs, table, &g->dims, &g->features, &g->rows, &g->params);
}

// `name` ([rows, cols]: grad_encoded, grad_grad_inputs) has the expected shape.
inline Result Matrix(const char* name, const Dims& t, int64_t rows, int64_t cols) {
  if (t != Dims{rows, cols}) {
    return Invalid(name, " must have shape [", rows, ", ", cols, "], got ", ShapeString(t));
  }
  return Ok();
}

}  // namespace hash_encode
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (hash_encode_metal.cc; shaders hash_encode.metal, buffer
// indices above): the forward, one thread per (point, level); the backward's
// table gradient (atomic float sums, or with `deterministic` 64-bit fixed
// point scaled by max |dy|) and input gradient. Every Metal path runs them
// (kernels/metal_plan/plan.h).
namespace mo::metal_plan {
// Forward slots {inputs [N, D] float32, table [P, F], encoded [N, L * F]}.
enum HashEncodeSlots { kHashEncodeSlotInputs, kHashEncodeSlotTable, kHashEncodeSlotEncoded, kHashEncodeSlots };
// Backward slots {grad_encoded, inputs, table, grad_table [P, F] (empty when
// not wanted), grad_inputs [N, D] float32 (empty when not wanted)}.
enum HashEncodeGradSlots {
  kHashEncodeGradSlotDy,
  kHashEncodeGradSlotInputs,
  kHashEncodeGradSlotTable,
  kHashEncodeGradSlotGradTable,
  kHashEncodeGradSlotGradInputs,
  kHashEncodeGradSlots
};

// The grid (params: hash_encode::InputsAndTable), D, F, the table's rows P
// and its element type (float32 or float16).
struct HashEncodeLayout {
  const hash_grid::Params* params;
  int dims, features;
  int64_t rows;
  Dtype dtype;
};
// params->num_points > 0.
Plan HashEncodeForward(const HashEncodeLayout& layout);
// At least one gradient wanted; the table gradient also when there are no points (zeros).
Plan HashEncodeBackward(const HashEncodeLayout& layout, bool table_grad, bool input_grad, bool deterministic);

}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_fp16.h>     // host
#include <cuda_runtime.h>  // host

#include <cstddef>  // host

// The CUDA launchers (hash_encode.cu.cc), plain C++ (no TensorFlow): the TF
// GPU kernels and XLA's CUDA handlers (hash_encode_cuda.cc) and the C-ABI
// harness (tests/cuda/hash_encode_harness.cu.cc). Formulas: kernels/common/hash_grid.h.
//
// Kernel layout (tiny-cuda-nn style): blocks of (points, level group). The
// G levels of a group are adjacent lanes of a warp, so a point's G * F
// outputs (32 bytes for float32, F = 2) are written by one store instruction
// as whole sectors (coalesced), and G levels at a time keep their slice of
// the table hot in L2 (G = 4 for float32, 8 for float16 forward, F = 2; the
// forward doubles G for groups of small coarse levels, see
// MakeForwardGroups in hash_encode.cu.cc).
// Forward: two lanes per (point, level), one for the x-lower and one for the
// x-upper corner of every x-pair, so the two rows of a pair are gathered by
// one instruction and cost one L2 request (the kernel is bound by L2
// requests); outputs use streaming stores. Backward: one thread per (point,
// level).
//
// Backward: table gradient with float32 red/atomic adds (float2/float4 vector
// atomics on sm_90; one atomic for both rows of an x-pair of corners when
// they share an aligned block), accumulated into a float32 buffer for half tables (never
// half atomics); coarse dense levels are pre-aggregated in shared memory by
// blocks that each sweep many points, then flushed with one atomic per
// touched entry. Deterministic mode accumulates in 64-bit fixed point (integer
// atomics, order-independent) with a power-of-two scale chosen from
// max|grad_encoded| * N so that no sum can overflow, and reduces the input
// gradient over level groups in a fixed order. The input gradient is computed
// in the same kernel from the table rows the thread touches (no dy/dx stored
// by the forward pass).
namespace mo::cuda {

struct HashEncodeBackwardOptions {
  bool table_grad = true;      // write grad_table [P, F]
  bool input_grad = false;     // write grad_inputs [N, D]
  bool deterministic = false;  // bitwise-reproducible results (fixed-point table accumulation)
  // Shared-memory budget per block for pre-aggregating coarse dense levels:
  // -1 = library default, 0 = off.
  int64_t aggregate_shared_bytes = -1;
  // Levels handled by one block (adjacent lanes); 0 = library default. Tuning knob.
  int levels_per_block = 0;
};

// encoded[N, L*F] = hash encoding of inputs[N, D] with table[P, F].
// T is float or __half. dims in 1..4, features in {1, 2, 4, 8}; table must be
// aligned to min(2 * features * sizeof(T), 16) bytes (the backward's contract:
// x-pairs of rows take one vector atomic), encoded to
// min(features * sizeof(T), 16); otherwise cudaErrorMisalignedAddress. TF and
// CuPy allocations always are.
// levels_per_block: 0 = library default (see hash_encode.cu.cc); a tuning knob.
template <typename T>
cudaError_t LaunchHashEncodeForward(const float* inputs, const T* table, T* encoded, int dims, int features,
                                    const hash_grid::Params& params, cudaStream_t stream,
                                    int levels_per_block = 0);

// Bytes of device scratch LaunchHashEncodeBackward needs (may be 0).
size_t HashEncodeBackwardWorkspaceBytes(int dims, int features, int64_t table_rows, bool half_table,
                                        const hash_grid::Params& params, const HashEncodeBackwardOptions& options);

// grad_table[P, F] (if options.table_grad) and grad_inputs[N, D] (if
// options.input_grad) from grad_encoded[N, L*F]. Both outputs are fully
// written (no need to zero them). workspace: HashEncodeBackwardWorkspaceBytes
// bytes, 256-byte aligned.
template <typename T>
cudaError_t LaunchHashEncodeBackward(const T* grad_encoded, const float* inputs, const T* table, T* grad_table,
                                     float* grad_inputs, void* workspace, size_t workspace_bytes, int dims,
                                     int features, int64_t table_rows, const hash_grid::Params& params,
                                     const HashEncodeBackwardOptions& options, cudaStream_t stream);

// Bytes of device scratch LaunchHashEncodeGradGrad needs (may be 0).
size_t HashEncodeGradGradWorkspaceBytes(int dims, int features, int64_t table_rows, bool half_table,
                                        const hash_grid::Params& params, bool deterministic);

// MetalOpsHashEncodeGradGrad (second derivatives, eikonal losses): given
// grad_grad_inputs[N, D] = dLoss/dgrad_inputs, writes grad_table[P, F] =
// dLoss/dtable and grad_grad_encoded[N, L*F] = dLoss/dgrad_encoded, the
// adjoints of the backward's input gradient (hash_grid.h's
// input_gradient_coefficient). One thread per (point, level); the table sums
// use the backward's accumulators: float32 atomics, or with deterministic the
// 64-bit fixed point, its scale chosen from the largest contribution of one
// (point, level). Both outputs are fully written. workspace:
// HashEncodeGradGradWorkspaceBytes bytes, 256-byte aligned; alignment of
// table, grad_table and grad_encoded as for the backward, grad_grad_encoded
// as for the forward's encoded.
template <typename T>
cudaError_t LaunchHashEncodeGradGrad(const float* grad_grad_inputs, const T* grad_encoded, const float* inputs,
                                     const T* table, T* grad_table, T* grad_grad_encoded, void* workspace,
                                     size_t workspace_bytes, int dims, int features, int64_t table_rows,
                                     const hash_grid::Params& params, bool deterministic, cudaStream_t stream);

}  // namespace mo::cuda

#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_CPU_BODIES)
// The CPU kernels' bodies, free of TensorFlow (scheduling only; the arithmetic
// is kernels/common/hash_grid.h): hash_encode_cpu.cc runs them on TF's thread
// pool, tests/neon/cpu_ops_main.cc builds them for arm64 and runs them under
// qemu; a file that wants them defines MO_CPU_BODIES before the include.
#include <algorithm>  // host
#include <cstring>    // host
#include <memory>     // host

#if defined(__FMA__)
#include "kernels/framework/x86_intrinsics.h"  // host
#endif

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
// time of kernels/hash_encode/hash_encode_cpu.cc, not the speed).
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

#endif  // MO_CPU_BODIES

#if defined(MO_TF_KERNEL)
// The TensorFlow kernel classes of MetalOpsHashEncode / MetalOpsHashEncodeGrad /
// MetalOpsHashEncodeGradGrad, once for every C++-API device (one class
// templated on the device, a functor per device, TF's pattern): the CPU
// functor and registrations in hash_encode_cpu.cc, the CUDA ones in
// hash_encode_cuda.cc, each of which includes TensorFlow's headers and
// kernels/framework/op_kernel_with_attrs.h first and defines MO_TF_KERNEL
// before the include (this header itself reaches no TensorFlow header).

namespace mo {
namespace hash_encode {

// inputs and table (inputs `first` and first + 1) against the grid: the
// table's geometry and the number of points.
template <typename A>
absl::Status CheckInputsAndTable(::tensorflow::OpKernelContext* ctx, const A& a, int first, TableGeometry* g,
                                 int64_t* n) {
  const ::tensorflow::Tensor& inputs = ctx->input(first);
  TF_RETURN_IF_ERROR(
      checks::ToStatus(InputsAndTable(a, checks::DimsOf(inputs), checks::DimsOf(ctx->input(first + 1)), g)));
  *n = inputs.dim_size(0);
  return absl::OkStatus();
}

inline absl::Status CheckMatrix(const char* name, const ::tensorflow::Tensor& t, int64_t rows, int64_t cols) {
  return checks::ToStatus(Matrix(name, checks::DimsOf(t), rows, cols));
}

// grad_encoded [N, L * F] (input `dy`) after inputs and table (inputs `first`
// and first + 1, CheckInputsAndTable).
template <typename A>
absl::Status CheckGradEncoded(::tensorflow::OpKernelContext* ctx, const A& a, int dy, int first, TableGeometry* g,
                              int64_t* n) {
  TF_RETURN_IF_ERROR(CheckInputsAndTable(ctx, a, first, g, n));
  return CheckMatrix("grad_encoded", ctx->input(dy), *n, int64_t(a.num_levels) * g->features);
}

}  // namespace hash_encode

template <typename T>
struct HashEncodeForwardArgs {
  int dims, features;
  int64_t num_points, rows;
  const float* inputs;  // [N, D]
  const T* table;       // [P, F]
  T* encoded;           // [N, L * F]
  const hash_grid::Params& params;  // the grid's geometry (InputsAndTable)
};

template <typename T>
struct HashEncodeBackwardArgs {
  int dims, features;
  int64_t num_points, rows;
  const T* grad_encoded;  // [N, L * F]
  const float* inputs;
  const T* table;
  T* grad_table;          // [P, F], or nullptr when not wanted
  float* grad_inputs;     // [N, D], or nullptr when not wanted
  bool deterministic;     // the op's attribute (devices may add TF's op determinism)
  const hash_grid::Params& params;  // the grid's geometry (InputsAndTable)
};

template <typename T>
struct HashEncodeGradGradArgs {
  int dims, features;
  int64_t num_points, rows;
  const float* grad_grad_inputs;  // [N, D]
  const T* grad_encoded;          // [N, L * F]
  const float* inputs;
  const T* table;
  T* grad_table;                  // [P, F]
  T* grad_grad_encoded;           // [N, L * F]
  const hash_grid::Params& params;  // the grid's geometry (InputsAndTable)
};

// Defined per device; num_points > 0 (forward) or at least one gradient
// wanted (backward); GradGrad takes any num_points (grad_table is zeros when 0).
template <typename Device, typename T>
struct HashEncodeFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const hash_encode::Attrs& a,
                              const HashEncodeForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const hash_encode::GradAttrs& a,
                               const HashEncodeBackwardArgs<T>& args);
  static absl::Status GradGrad(::tensorflow::OpKernelContext* ctx, const HashEncodeGradGradArgs<T>& args);
};

template <typename Device, typename T>
class HashEncodeOp : public OpKernelWithAttrs<hash_encode::Attrs> {
 public:
  using OpKernelWithAttrs<hash_encode::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, hash_encode::CheckInputsAndTable(ctx, attrs_, 0, &g, &n));
    const ::tensorflow::Tensor& inputs = ctx->input(0);
    const ::tensorflow::Tensor& table = ctx->input(1);
    T* out = nullptr;
    const int64_t width = int64_t(attrs_.num_levels) * g.features;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 0, ::tensorflow::TensorShape({n, width}), &out));
    if (n == 0) return;
    const HashEncodeForwardArgs<T> args = {g.dims, g.features, n, g.rows, inputs.flat<float>().data(),
                                           table.flat<T>().data(), out, g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Device, T>::Forward(ctx, attrs_, args)));
  }
};

template <typename Device, typename T>
class HashEncodeGradOp : public OpKernelWithAttrs<hash_encode::GradAttrs> {
 public:
  using OpKernelWithAttrs<hash_encode::GradAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, hash_encode::CheckGradEncoded(ctx, attrs_, 0, 1, &g, &n));
    const ::tensorflow::Tensor& dy = ctx->input(0);
    const ::tensorflow::Tensor& inputs = ctx->input(1);
    const ::tensorflow::Tensor& table = ctx->input(2);
    const bool table_grad = attrs_.compute_table_grad, input_grad = attrs_.compute_input_grad;
    T* grad_table = nullptr;
    float* grad_inputs = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 0, ::tensorflow::TensorShape({table_grad ? g.rows : 0, g.features}),
                                       &grad_table));
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 1, ::tensorflow::TensorShape({input_grad ? n : 0, g.dims}), &grad_inputs));
    if (!table_grad && !input_grad) return;
    const HashEncodeBackwardArgs<T> args = {
        g.dims, g.features, n, g.rows, dy.flat<T>().data(), inputs.flat<float>().data(), table.flat<T>().data(),
        table_grad ? grad_table : nullptr, input_grad ? grad_inputs : nullptr, attrs_.deterministic, g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Device, T>::Backward(ctx, attrs_, args)));
  }
};

// The gradients of <grad_grad_inputs, grad_inputs> (second derivatives, for
// eikonal losses): the table's and grad_encoded's.
template <typename Device, typename T>
class HashEncodeGradGradOp : public OpKernelWithAttrs<hash_encode::Attrs> {
 public:
  using OpKernelWithAttrs<hash_encode::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    hash_encode::TableGeometry g;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, hash_encode::CheckGradEncoded(ctx, attrs_, 1, 2, &g, &n));
    const ::tensorflow::Tensor& ggx = ctx->input(0);
    const ::tensorflow::Tensor& dy = ctx->input(1);
    const ::tensorflow::Tensor& inputs = ctx->input(2);
    const ::tensorflow::Tensor& table = ctx->input(3);
    OP_REQUIRES_OK(ctx, hash_encode::CheckMatrix("grad_grad_inputs", ggx, n, g.dims));
    T *grad_table = nullptr, *grad_dy = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 0, table.shape(), &grad_table));
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 1, dy.shape(), &grad_dy));
    const HashEncodeGradGradArgs<T> args = {g.dims, g.features, n, g.rows, ggx.flat<float>().data(),
                                            dy.flat<T>().data(), inputs.flat<float>().data(), table.flat<T>().data(),
                                            grad_table, grad_dy, g.params};
    OP_REQUIRES_OK(ctx, (HashEncodeFunctor<Device, T>::GradGrad(ctx, args)));
  }
};

}  // namespace mo

// The registrations of the kernel classes on one device (DEVICE_CPU or
// DEVICE_GPU, its Eigen device type), float and half
// (kernels/framework/register_kernels.h), in namespace mo.
#define MO_HASH_ENCODE_REGISTER_KERNELS(DEVICE, DEVICE_TYPE)                                                   \
  MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE, DEVICE_TYPE, float);                        \
  MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE, DEVICE_TYPE, Eigen::half);                  \
  MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE, float, HashEncodeGradGradOp<DEVICE_TYPE, float>);         \
  MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE, Eigen::half, HashEncodeGradGradOp<DEVICE_TYPE, Eigen::half>)
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_H_
