// FusedMLP's Metal kernel layout, once for the shader (kernels/fused_mlp/fused_mlp.metal),
// its plans (kernels/fused_mlp/fused_mlp_plan.cc) and the MSL shim runner
// (tests/metal_shim/fused_mlp_shim.cc): the shaders' buffer indices, the
// argument structs, the packed weight and weight-gradient layouts, and (host
// side) how a call is cut into threadgroups and threadgroup memory.
// docs/FUSED_MLP.md ("Metal") explains the design.
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_H_

#include "kernels/common/platform.h"

namespace mo {

// Every matrix is handled in 8x8 simdgroup_matrix tiles; a SIMD-group has 32
// lanes and owns 8 rows of a threadgroup's row tile.
#define MO_FUSED_MLP_TILE 8
#define MO_FUSED_MLP_SIMD_WIDTH 32
// The most simdgroup_matrix tiles one output row block can span (128 / 8).
#define MO_FUSED_MLP_MAX_COL_TILES 16

// The Metal buffer indices of the four shaders (declared by fused_mlp.metal,
// bound by kernels/fused_mlp/fused_mlp_plan.cc).
enum FusedMlpForwardBuffer {
  kFusedMlpForwardX,
  kFusedMlpForwardWeights,  // packed (fused_mlp_pack)
  kFusedMlpForwardBiases,   // packed
  kFusedMlpForwardY,
  kFusedMlpForwardHidden,
  kFusedMlpForwardParams
};
enum FusedMlpBackwardBuffer {
  kFusedMlpBackwardDy,
  kFusedMlpBackwardX,
  kFusedMlpBackwardY,
  kFusedMlpBackwardHidden,
  kFusedMlpBackwardWeights,   // packed
  kFusedMlpBackwardPartials,  // float32, zeroed first
  kFusedMlpBackwardDx,
  kFusedMlpBackwardParams
};
enum FusedMlpPackBuffer { kFusedMlpPackSrc, kFusedMlpPackDst, kFusedMlpPackParams };
enum FusedMlpReduceBuffer {
  kFusedMlpReducePartials,
  kFusedMlpReduceGradKernel,
  kFusedMlpReduceGradBias,
  kFusedMlpReduceParams
};

// One forward or backward dispatch. Weights are packed per layer into
// [rows_pad, cols_pad] blocks (zero padding; fused_mlp_weight_offset), so the
// shaders never bound-check a weight.
struct FusedMlpParams {
  int64 n;          // rows of x
  int64 num_tiles;  // row tiles of `rows` rows
  int64 params_pad; // floats of one weight-gradient partial (backward)
  int64 part_tiles; // num_tiles / partitions: a partition's tiles, without a 64-bit division on the GPU
  int32 in_dim, in_pad, width, out_dim, out_pad, hidden_layers;
  int32 activation, output_activation;
  float alpha;
  int32 simdgroups;  // per threadgroup (threads = 32 * simdgroups)
  int32 rows;        // rows per tile = 8 * simdgroups
  int32 stride;      // row stride of the threadgroup activation tiles
  int32 chunk;       // weight rows (forward) / columns (backward) staged at a time
  int32 off_a, off_b, off_w;  // byte offsets of the tiles in threadgroup memory
  int32 tg_bytes;    // threadgroup memory per threadgroup
  int32 partitions;  // backward: weight-gradient partial sums, one per threadgroup
  int32 part_rem;    // num_tiles % partitions
  int32 pad_;        // keeps sizeof a multiple of 8 everywhere
};

// Partition g's first row tile, floor(g * num_tiles / partitions), as
// g * part_tiles + floor(g * part_rem / partitions): the division is 32-bit
// (g and part_rem are below partitions <= kFusedMlpMaxPartitions).
MO_FN int64 fused_mlp_partition_start(MO_CONSTANT FusedMlpParams& p, int32 g) {
  return int64(g) * p.part_tiles + int64(uint32(g) * uint32(p.part_rem) / uint32(p.partitions));
}

// Copies a [rows, cols] matrix into a zero-padded [rows_pad, cols_pad] block at dst + offset.
struct FusedMlpPackParams {
  int64 offset;
  int32 rows, cols, rows_pad, cols_pad;
};

// Sums the partitions' partials of one layer into its kernel and bias gradient.
struct FusedMlpReduceParams {
  int64 params_pad;  // floats per partition
  int64 w_offset;    // the layer's [rows_pad, cols_pad] block in a partial
  int64 b_offset;    // its bias block [cols_pad]
  int32 rows, cols, cols_pad, partitions;
};

MO_FN int32 fused_mlp_pad(int32 d) { return (d + MO_FUSED_MLP_TILE - 1) / MO_FUSED_MLP_TILE * MO_FUSED_MLP_TILE; }

// Layer l's packed kernel block: [in_pad, W] for l = 0, [W, W] for the
// further hidden layers, [W, out_pad] for the output layer (l = hidden_layers).
MO_FN int32 fused_mlp_rows_pad(int32 l, int32 in_pad, int32 width) { return l == 0 ? in_pad : width; }
MO_FN int32 fused_mlp_cols_pad(int32 l, int32 hidden_layers, int32 width, int32 out_pad) {
  return l == hidden_layers ? out_pad : width;
}
MO_FN int64 fused_mlp_weight_offset(int32 l, int32 in_pad, int32 width) {
  return l == 0 ? int64(0) : int64(in_pad) * width + int64(l - 1) * width * width;
}
MO_FN int64 fused_mlp_weights_total(int32 in_pad, int32 width, int32 out_pad, int32 hidden_layers) {
  return fused_mlp_weight_offset(hidden_layers, in_pad, width) + int64(width) * out_pad;
}
MO_FN int64 fused_mlp_bias_offset(int32 l, int32 width) { return int64(l) * width; }
MO_FN int64 fused_mlp_biases_total(int32 width, int32 out_pad, int32 hidden_layers) {
  return int64(hidden_layers) * width + out_pad;
}

#if !defined(__METAL_VERSION__)
// ---- host side (the .mm glue and the shim runner): how a call is cut up ----

// The forward's threadgroups: at most this many (they loop over the row tiles beyond).
constexpr uint64 kFusedMlpMaxThreadgroups = uint64(1) << 20;
// Apple GPUs give a threadgroup 32 KiB of threadgroup memory.
constexpr int kFusedMlpThreadgroupMemory = 32768;
// Weight-gradient partial sums: at most this many (GPU occupancy), and at
// most kFusedMlpPartialFloats floats in all (device memory).
constexpr int64 kFusedMlpMaxPartitions = 256;
constexpr int64 kFusedMlpPartialFloats = int64(1) << 24;

inline int32 fused_mlp_max3(int32 a, int32 b, int32 c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// The dispatch arguments for x [n, in_dim], hidden width `width`, out_dim,
// elements of `elem_bytes` bytes. Tiles: the forward keeps one [rows, stride]
// activation tile (a), the backward two (a: dL/dz, b: the layer's input), plus a
// [chunk, stride] weight chunk (w) and one 8x8 float scratch per SIMD-group.
// The most SIMD-groups (up to 4) whose tiles fit, then the largest chunk.
// Depends only on the shapes and dtype (never on the device), so results are
// the same on every Mac. False when nothing fits (not for valid networks).
inline bool fused_mlp_params(int64 n, int32 in_dim, int32 width, int32 out_dim, int32 hidden_layers,
                             int32 activation, int32 output_activation, float alpha, int32 elem_bytes, bool backward,
                             FusedMlpParams* p, int64 max_threads = 4 * MO_FUSED_MLP_SIMD_WIDTH) {
  p->n = n;
  p->in_dim = in_dim;
  p->in_pad = fused_mlp_pad(in_dim);
  p->width = width;
  p->out_dim = out_dim;
  p->out_pad = fused_mlp_pad(out_dim);
  p->hidden_layers = hidden_layers;
  p->activation = activation;
  p->output_activation = output_activation;
  p->alpha = alpha;
  p->stride = fused_mlp_max3(p->in_pad, width, p->out_pad);
  // The dimension staged in chunks: the forward's K (a layer's rows), the backward's (its columns).
  const int32 staged = backward ? (width > p->out_pad ? width : p->out_pad) : (width > p->in_pad ? width : p->in_pad);
  const int32 tiles = backward ? 2 : 1;
  for (int32 s = 4; s >= 1; s /= 2) {
    // A pipeline may run fewer threads per threadgroup than 4 SIMD-groups
    // (maxTotalThreadsPerThreadgroup): fewer SIMD-groups then.
    if (int64(s) * MO_FUSED_MLP_SIMD_WIDTH > max_threads) continue;
    const int32 rows = MO_FUSED_MLP_TILE * s;
    const int32 scratch = s * MO_FUSED_MLP_TILE * MO_FUSED_MLP_TILE * 4;
    const int32 tile_bytes = rows * p->stride * elem_bytes;
    for (int32 chunk = 128; chunk >= MO_FUSED_MLP_TILE; chunk /= 2) {
      if (chunk > staged && chunk > MO_FUSED_MLP_TILE) continue;
      int32 total = scratch + tiles * tile_bytes + chunk * p->stride * elem_bytes;
      total = (total + 15) / 16 * 16;
      if (total > kFusedMlpThreadgroupMemory) continue;
      p->simdgroups = s;
      p->rows = rows;
      p->chunk = chunk;
      p->off_a = scratch;
      p->off_b = scratch + tile_bytes;
      p->off_w = scratch + tiles * tile_bytes;
      p->tg_bytes = total;
      p->num_tiles = (n + rows - 1) / rows;
      p->params_pad = fused_mlp_weights_total(p->in_pad, width, p->out_pad, hidden_layers) +
                      fused_mlp_biases_total(width, p->out_pad, hidden_layers);
      int64 parts = kFusedMlpPartialFloats / p->params_pad;
      if (parts > kFusedMlpMaxPartitions) parts = kFusedMlpMaxPartitions;
      if (parts > p->num_tiles) parts = p->num_tiles;
      p->partitions = int32(parts < 1 ? 1 : parts);
      p->part_tiles = p->num_tiles / p->partitions;
      p->part_rem = int32(p->num_tiles % p->partitions);
      p->pad_ = 0;
      return true;
    }
  }
  return false;
}

inline FusedMlpPackParams fused_mlp_pack_params(const FusedMlpParams& p, int32 l, bool bias) {
  FusedMlpPackParams q;
  const int32 rows = l == 0 ? p.in_dim : p.width;
  const int32 cols = l == p.hidden_layers ? p.out_dim : p.width;
  const int32 cols_pad = fused_mlp_cols_pad(l, p.hidden_layers, p.width, p.out_pad);
  q.offset = bias ? fused_mlp_bias_offset(l, p.width) : fused_mlp_weight_offset(l, p.in_pad, p.width);
  q.rows = bias ? 1 : rows;
  q.cols = cols;
  q.rows_pad = bias ? 1 : fused_mlp_rows_pad(l, p.in_pad, p.width);
  q.cols_pad = cols_pad;
  return q;
}

inline FusedMlpReduceParams fused_mlp_reduce_params(const FusedMlpParams& p, int32 l) {
  FusedMlpReduceParams q;
  q.params_pad = p.params_pad;
  q.w_offset = fused_mlp_weight_offset(l, p.in_pad, p.width);
  q.b_offset = fused_mlp_weights_total(p.in_pad, p.width, p.out_pad, p.hidden_layers) +
               fused_mlp_bias_offset(l, p.width);
  q.rows = l == 0 ? p.in_dim : p.width;
  q.cols = l == p.hidden_layers ? p.out_dim : p.width;
  q.cols_pad = fused_mlp_cols_pad(l, p.hidden_layers, p.width, p.out_pad);
  q.partitions = p.partitions;
  return q;
}
#endif  // !__METAL_VERSION__

}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_H_
