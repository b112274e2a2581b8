// FusedMLP: tiny-cuda-nn's fully fused MLP, y = f_out(h_L W_L + b_L),
// h_l = f(h_{l-1} W_l + b_l), h_0 = x, and its gradient. This header is the
// op's one description shared by every backend: the Metal kernel layout (the
// shaders' buffer indices, the argument structs, the packed weight and
// weight-gradient layouts and, host side, how a call is cut into threadgroups
// and threadgroup memory; docs/FUSED_MLP.md, "Metal"), the op's declaration
// (its attribute list, MO_FUSED_MLP_ATTRS) and, in host code, the checks and
// network sizes every kernel runs, the Metal plans' signatures, the CUDA
// launchers' (and, for nvcc, what their implementations share), the CPU
// bodies (MO_CPU_BODIES) and the TensorFlow kernel classes (MO_TF_KERNEL).
// The op's files (docs/ADDING_AN_OP.md):
//   fused_mlp_op.cc     REGISTER_OP                 fused_mlp_cpu.cc    CPU kernels, XLA host handlers
//   fused_mlp.cu.cc     CUDA launchers              fused_mlp_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   fused_mlp.metal     Metal shaders               fused_mlp_metal.cc  Metal plans, tensorflow-metal glue
//   fused_mlp_xla.cc    XLA op kernels
//   fused_mlp_mma.cu.cc, fused_mlp_layers.cu.cc, fused_mlp_layers_tf32.cu.cc: the CUDA implementations,
//   fused_mlp_mma.h: their tensor-core building blocks
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
// bound by the plans of kernels/fused_mlp/fused_mlp_metal.cc).
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

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsFusedMLP(x, kernels [N], biases [N]) -> y, hidden and
// MetalOpsFusedMLPGrad(grad_y, x, kernels [N], y, hidden) -> grad_x,
// grad_kernels [N], grad_biases [N], T in {float, half}. N is the length of
// the list inputs (hidden layers + 1). The activations are held as their codes
// (kernels/common/activations.h); leaky_relu_alpha stays below 1: the backward
// reads the slope from the output.
#define MO_FUSED_MLP_HIDDEN_ACTIVATIONS "none", "relu", "leaky_relu", "sigmoid", "softplus"
#define MO_FUSED_MLP_ATTRS(ATTR)                                                                  \
  ATTR(N, RequiredInt64, 1, INT64_MAX)                                                             \
  ATTR(activation, EnumIn, ::mo::kActivationNames, ::mo::kActRelu, MO_FUSED_MLP_HIDDEN_ACTIVATIONS) \
  ATTR(output_activation, EnumIn, ::mo::kActivationNames, ::mo::kActNone, MO_FUSED_MLP_HIDDEN_ACTIVATIONS, \
       "trunc_exp")                                                                                \
  ATTR(leaky_relu_alpha, FloatBelow, 0.2f, 0.0f, 1.0f)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/activations.h"  // host
#include "kernels/spec/checks.h"  // host
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace fused_mlp {

// Attrs { int64_t N; int activation, output_activation; float leaky_relu_alpha; },
// ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("FusedMLP", MO_FUSED_MLP_ATTRS);

// Whether `act` (a code) is one of the hidden layers' activations (the
// launchers check their shapes themselves: the harness calls them too).
inline bool HiddenActivationOk(int act) {
  const char* const names[] = {MO_FUSED_MLP_HIDDEN_ACTIVATIONS};
  for (const char* name : names) {
    if (0 <= act && act < kNumActivations && attrs::SameText(name, kActivationNames[act])) return true;
  }
  return false;
}

}  // namespace fused_mlp
}  // namespace mo

// The checks, written once for every kernel of the op (CPU, CUDA, Metal, XLA)
// and its shape function, and the one definition of the network sizes the
// kernels run (the CUDA launchers read them too). No TensorFlow API: sizes
// in, kernels/spec/checks.h's Result out.
namespace mo {
namespace fused_mlp {

constexpr int kWidths[] = {16, 32, 64, 128};  // hidden widths
constexpr int kMaxHiddenLayers = 8;
// Input and output widths. Also keeps the Metal pack and reduce shaders'
// index arithmetic (at most 128 x 128 per layer) in 32 bits (fused_mlp.metal).
constexpr int64_t kMaxIoWidth = 128;

inline bool WidthSupported(int64_t width) {
  for (int w : kWidths) {
    if (width == w) return true;
  }
  return false;
}

// The network a list of kernels and biases describes.
struct Net {
  int64_t in_dim = 0, width = 0, out_dim = 0;
  int hidden_layers = 0;  // matrices - 1
};

// x [N, in], kernels [in, W], [W, W] x (L - 1), [W, out] and biases [W] x L, [out],
// W in {16, 32, 64, 128}, 1 <= L <= 8, in and out in [1, 128].
inline Result Shapes(const Dims& x, const std::vector<Dims>& kernels, const std::vector<Dims>& biases, Net* net) {
  const int m = static_cast<int>(kernels.size());
  if (m < 2 || m > kMaxHiddenLayers + 1) {
    return Invalid("FusedMLP: 'kernels' must hold 2 to ", kMaxHiddenLayers + 1,
                   " matrices (1 to 8 hidden layers and the output layer), got ", m);
  }
  if (biases.size() != kernels.size()) {
    return Invalid("FusedMLP: 'biases' must hold one vector per kernel (", m, "), got ", biases.size());
  }
  if (x.size() != 2) return Invalid("FusedMLP: 'x' must be [N, in_dim], got shape ", ShapeString(x));
  for (int l = 0; l < m; ++l) {
    if (kernels[l].size() != 2) {
      return Invalid("FusedMLP: 'kernels[", l, "]' must be a matrix, got shape ", ShapeString(kernels[l]));
    }
  }
  net->in_dim = x[1];
  net->width = kernels[0][1];
  net->out_dim = kernels[m - 1][1];
  net->hidden_layers = m - 1;
  if (!WidthSupported(net->width)) {
    return Invalid("FusedMLP: the hidden width (columns of 'kernels[0]') must be 16, 32, 64 or 128, got ",
                   net->width);
  }
  if (net->in_dim < 1 || net->in_dim > kMaxIoWidth) {
    return Invalid("FusedMLP: the input width (the last dimension of 'x') must be in [1, ", kMaxIoWidth, "], got ",
                   net->in_dim);
  }
  if (net->out_dim < 1 || net->out_dim > kMaxIoWidth) {
    return Invalid("FusedMLP: the output width (columns of the last kernel) must be in [1, ", kMaxIoWidth,
                   "], got ", net->out_dim);
  }
  for (int l = 0; l < m; ++l) {
    const int64_t rows = l == 0 ? net->in_dim : net->width;
    const int64_t cols = l == m - 1 ? net->out_dim : net->width;
    if (kernels[l] != Dims{rows, cols}) {
      return Invalid("FusedMLP: 'kernels[", l, "]' must be [", rows, ", ", cols, "] for 'x' ", ShapeString(x),
                     " and hidden width ", net->width, ", got ", ShapeString(kernels[l]));
    }
    if (biases[l] != Dims{cols}) {
      return Invalid("FusedMLP: 'biases[", l, "]' must be [", cols, "], got ", ShapeString(biases[l]));
    }
  }
  return Ok();
}

// The backward's extra inputs: dy [N, out], y [N, out], hidden [L, N, W].
inline Result GradShapes(const Net& net, int64_t n, const Dims& dy, const Dims& y, const Dims& hidden) {
  const Dims out = {n, net.out_dim};
  if (dy != out || y != out) {
    return Invalid("FusedMLPGrad: 'grad_y' and 'y' must be [N, out_dim] = ", ShapeString(out), ", got ",
                   ShapeString(dy), " and ", ShapeString(y));
  }
  const Dims h = {net.hidden_layers, n, net.width};
  if (hidden != h) {
    return Invalid("FusedMLPGrad: 'hidden' must be [hidden_layers, N, width] = ", ShapeString(h), ", got ",
                   ShapeString(hidden));
  }
  return Ok();
}

}  // namespace fused_mlp
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (fused_mlp_metal.cc; shaders: fused_mlp.metal, which needs
// simdgroup_matrix: Apple7+ GPUs). Every Metal path runs them
// (kernels/metal_plan/plan.h).
//   forward:  each kernel and bias packed into its zero-padded block (one
//             small pass each), then threadgroups of row tiles through every
//             layer (y and hidden);
//   backward: the float32 partials zeroed, the kernels packed, one threadgroup
//             per partition of the row tiles (grad_x and that partition's
//             weight- and bias-gradient sums), then per layer the partials
//             added in partition order: no atomics, bitwise deterministic.
// The tensor slots depend on the number of layers L = hidden_layers + 1
// (FusedMlpSlots).
namespace mo {
namespace metal_plan {

// The slots of a network of L layers, in the op's order.
struct FusedMlpSlots {
  int layers;
  // Forward: x, kernels[L], biases[L], y [n, out_dim], hidden [hidden_layers, n, W].
  int x() const { return 0; }
  int kernel(int l) const { return 1 + l; }
  int bias(int l) const { return 1 + layers + l; }
  int y() const { return 1 + 2 * layers; }
  int hidden() const { return 2 + 2 * layers; }
  int forward_slots() const { return 3 + 2 * layers; }
  // Backward: grad_y, x, kernels[L], y, hidden, then grad_x, grad_kernels[L], grad_biases[L].
  int grad_y() const { return 0; }
  int grad_x_input() const { return 1; }
  int grad_kernel_input(int l) const { return 2 + l; }
  int grad_y_input() const { return 2 + layers; }
  int grad_hidden_input() const { return 3 + layers; }
  int grad_x() const { return 4 + layers; }
  int grad_kernel(int l) const { return 5 + layers + l; }
  int grad_bias(int l) const { return 5 + 2 * layers + l; }
  int backward_slots() const { return 5 + 3 * layers; }
};

// p from fused_mlp_params (its n > 0 for the forward; the backward of n = 0
// writes zero gradients), of `dtype` float32 or float16.
Plan FusedMlpForward(const FusedMlpParams& p, Dtype dtype);
Plan FusedMlpBackward(const FusedMlpParams& p, Dtype dtype);

// The host name of the row-tile shader of a network `width` wide
// (fused_mlp_<forward|backward>_w<W>_<dtype>): the pipeline whose
// maxTotalThreadsPerThreadgroup bounds the SIMD-groups of fused_mlp_params.
std::string FusedMlpTileShader(int width, bool backward, Dtype dtype);

}  // namespace metal_plan
}  // namespace mo
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/cublas_gemm.h"  // host

// The CUDA launchers (fused_mlp.cu.cc), plain C++ (no TensorFlow): the TF GPU
// kernels and XLA's CUDA handlers (fused_mlp_cuda.cc) and the C-ABI harness
// (tests/cuda/fused_mlp_harness.cu.cc).
//
// Layout (Keras Dense): x [n, in_dim], kernel l [in_l, out_l], bias l [out_l],
// y [n, out_dim], all row-major. Matrices: hidden_layers + 1 (in -> width,
// width -> width x (hidden_layers - 1), width -> out). T is float or __half
// (float accumulation). __half runs fully fused on tensor cores; float32 on
// TF32 tensor cores fully fused, or layer by layer through cuBLAS (exact
// float32 products, and TF32 at width 128: FusedMlpUsesLayers).
namespace mo {
namespace cuda {

// The limits are the checks' (above).
constexpr int kFusedMlpMaxMatrices = fused_mlp::kMaxHiddenLayers + 1;          // hidden layers + output
constexpr int kFusedMlpMaxIoWidth = static_cast<int>(fused_mlp::kMaxIoWidth);  // padded to 16 inside

struct FusedMlpShape {
  int64_t n;
  int in_dim, width, hidden_layers, out_dim;
  int activation, output_activation;  // mo::Activation codes
  float alpha;                        // leaky_relu slope
  // float32 only: products on TF32 tensor cores (operands rounded to 10-bit
  // mantissas, float accumulation; docs/FUSED_MLP_GPU.md) instead of exact
  // float32 products. float16 ignores it.
  bool tf32 = false;
  // float32 with tf32 only, for tuning and tests: kFusedMlpTf32Auto (the
  // library's choice, FusedMlpUsesLayers), kFusedMlpTf32Fused or
  // kFusedMlpTf32Layers.
  int tf32_impl = 0;
  // The TF32 layer path's staged backward kernels (docs/FUSED_MLP_GPU.md),
  // for tests: rows per staged chunk, 0 for the device's choice (64, or 32
  // where 64 do not fit its shared memory), 32, or -1 for none (the first
  // ReLU backward kernel and cuBLAS, as on devices where neither fits).
  int tf32_staged_rows = 0;
};

constexpr int kFusedMlpTf32Auto = 0;
constexpr int kFusedMlpTf32Fused = 1;
constexpr int kFusedMlpTf32Layers = 2;

// Whether a float32 network runs layer by layer (cuBLAS GEMMs and elementwise
// bias / activation passes) rather than fully fused: always for exact float32
// (cuBLAS's SGEMM is faster than a fused CUDA-core kernel at every benchmark
// shape), and for TF32 at width 128, where one warp's rows of activations and
// their accumulators no longer fit the registers with room for more than one
// 16-row tile (docs/FUSED_MLP_GPU.md has the measurements).
inline bool FusedMlpUsesLayers(const FusedMlpShape& s) {
  if (!s.tf32) return true;
  if (s.tf32_impl != kFusedMlpTf32Auto) return s.tf32_impl == kFusedMlpTf32Layers;
  return s.width >= 128;
}

template <typename T>
struct FusedMlpParams {
  const T* w[kFusedMlpMaxMatrices];
  const T* b[kFusedMlpMaxMatrices];
};

template <typename T>
struct FusedMlpGrads {
  T* dw[kFusedMlpMaxMatrices];  // each may be null (not wanted)
  T* db[kFusedMlpMaxMatrices];
};

// y = MLP(x). `saved` (null for inference) receives every hidden layer's
// activation output, [hidden_layers, n, width], which the backward reads.
// Float32 layer by layer without `saved` takes two hidden layers' scratch
// from CUDA's stream-ordered allocator (cudaMallocAsync) for the call.
// Errors name the failed call (a bad shape or activation: "FusedMLP shape").
template <typename T>
GpuStatus LaunchFusedMlpForward(const T* x, const FusedMlpParams<T>& p, T* y, T* saved,
                                  const FusedMlpShape& s, cudaStream_t stream);

// Device scratch LaunchFusedMlpBackward needs on the current device: the
// weight-gradient partials, and per-layer dL/dz of the batch only where the
// backward cannot form the weight gradients itself (its weights do not fit
// the device's shared memory) or runs layer by layer.
size_t FusedMlpBackwardWorkspaceBytes(const FusedMlpShape& s, size_t elem_size);

// Gradients of sum(dy * y) for x (dx, may be null) and every weight and bias
// (null entries skipped). y and saved are the forward's outputs. dW/db are
// reduced from per-block partials in a fixed order, or computed by cuBLAS
// GEMMs (layer by layer): bitwise deterministic on one GPU either way.
// workspace_bytes (at least FusedMlpBackwardWorkspaceBytes) is checked.
template <typename T>
GpuStatus LaunchFusedMlpBackward(const T* dy, const T* x, const T* y, const T* saved,
                                   const FusedMlpParams<T>& p, T* dx, const FusedMlpGrads<T>& g,
                                   void* workspace, size_t workspace_bytes, const FusedMlpShape& s,
                                   cudaStream_t stream);

}  // namespace cuda
}  // namespace mo
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(__CUDACC__)
#include <algorithm>

// What the CUDA launchers (fused_mlp.cu.cc) and their implementations share:
// the padded dimensions, the backward workspace layout, and the
// implementations' entry points:
//   float16: fused_mlp_mma.cu.cc, tensor cores (mma.sync), rows in registers
//   float32 with FusedMlpShape::tf32: the same kernels on TF32 tensor cores
//   float32 layer by layer (FusedMlpUsesLayers): fused_mlp_layers.cu.cc,
//     cuBLAS GEMMs and elementwise passes; on TF32 its backward kernels are
//     fused_mlp_layers_tf32.cu.cc
// (the tensor-core building blocks both use: fused_mlp_mma.h). Device code
// (nvcc only).
namespace mo {
namespace cuda {
namespace fused_mlp_impl {

// Weight-gradient partials: row splits of the weight-gradient kernel, a
// function of N only, at least kSplitRows rows each; the backward that forms
// the weight gradients itself uses one per block of its grid, at most as many.
constexpr int kMaxSplits = 256;
constexpr int kSplitRows = 4096;

// Blocks, at most, of the TF32 layer path's first ReLU backward kernel and of
// its staged kernels (the ReLU backward with dW, the input layer's dx and
// dW), whose per-block dW partials are in the workspace.
constexpr int kMaxDreluBlocks = 1024;
constexpr int kMaxStagedBackwardBlocks = 256;

inline int Pad16(int v) { return (v + 15) / 16 * 16; }

__host__ __device__ constexpr size_t Align128(size_t b) { return (b + 127) / 128 * 128; }

struct Dims {
  int in_p, out_p, d;  // padded input/output widths, max(width, in_p, out_p)
};

inline Dims DimsOf(const FusedMlpShape& s) {
  Dims d;
  d.in_p = Pad16(s.in_dim);
  d.out_p = Pad16(s.out_dim);
  d.d = std::max(s.width, std::max(d.in_p, d.out_p));
  return d;
}

// Matrix l: rows (true, padded), cols (true, padded).
__host__ __device__ inline void MatrixDims(int l, int matrices, int in_dim, int in_p, int width,
                                           int out_dim, int out_p, int* k, int* kp, int* nn,
                                           int* np) {
  *k = l == 0 ? in_dim : width;
  *kp = l == 0 ? in_p : width;
  *nn = l == matrices - 1 ? out_dim : width;
  *np = l == matrices - 1 ? out_p : width;
}

// dL/dz of every layer, [n, np_l] each, in the backward workspace.
template <typename T>
struct DzBuffers {
  T* dz[kFusedMlpMaxMatrices];  // null when not needed
};

inline int Splits(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (n + kSplitRows - 1) / kSplitRows)));
}

// Which backward runs, and so what its workspace holds:
//   kLayers: float32 layer by layer (dz of every layer, ones, ReLU sums);
//   kFusedWgrad: every weight resident, the backward forms the weight
//     gradients itself (per-block partials only);
//   kWgradKernel: weights streamed, dz of every layer goes to memory for
//     MmaWgradKernel (dz and partials).
enum class BackwardPath { kLayers, kFusedWgrad, kWgradKernel };

// The path on the current device (its shared memory decides residency);
// kWgradKernel when the device cannot be queried (its workspace also holds
// the fused path's).
BackwardPath BackwardPathOf(const FusedMlpShape& s, size_t elem);

struct WsLayout {
  BackwardPath path;
  size_t dz_off[kFusedMlpMaxMatrices];  // valid unless path == kFusedWgrad
  size_t ones_off;  // kLayers: n ones (the bias gradients, 1^T dz)
  size_t drelu_off;  // kLayers: DreluProductTf32's per-block column sums
  size_t drelu_dw_off;  // kLayers: the staged backward kernels' per-block weight gradients
  size_t part_off;
  int splits;
  int64_t part_stride;
  size_t total;
};

inline WsLayout Layout(const FusedMlpShape& s, size_t elem, BackwardPath path) {
  const Dims dm = DimsOf(s);
  WsLayout w;
  w.path = path;
  size_t off = 0;
  const int matrices = s.hidden_layers + 1;
  for (int l = 0; l < matrices; ++l) {
    const int np = l == matrices - 1 ? dm.out_p : s.width;
    w.dz_off[l] = off;
    if (path != BackwardPath::kFusedWgrad) off += Align128(elem * static_cast<size_t>(s.n) * np);
  }
  const bool layers = path == BackwardPath::kLayers;
  w.ones_off = off;
  if (layers) off += Align128(sizeof(float) * static_cast<size_t>(s.n));
  w.drelu_off = off;
  if (layers) off += Align128(sizeof(float) * kMaxDreluBlocks * s.width);
  w.drelu_dw_off = off;
  if (layers) {
    // dW of a hidden, the output or the input layer; a block takes 32 rows at least.
    const int64_t blocks = std::min<int64_t>(kMaxStagedBackwardBlocks, (s.n + 31) / 32);
    const size_t per_block = static_cast<size_t>(s.width) * std::max({s.width, dm.out_p, dm.in_p});
    off += Align128(sizeof(float) * static_cast<size_t>(blocks) * per_block);
  }
  w.splits = Splits(s.n);
  w.part_stride = static_cast<int64_t>(dm.d) * dm.d + dm.d;
  w.part_off = off;
  if (!layers) off += Align128(sizeof(float) * static_cast<size_t>(matrices) * w.splits * w.part_stride);
  w.total = off;
  return w;
}

// The implementations, for n > 0 and a shape ShapeOk admits. The fused
// backward writes dx and, when any_wgrad, the weight-gradient partials, *parts
// of them (at most ws.splits, summed in order by the caller; dz is written to
// `bufs` only when the weight gradients run as their own kernel); the layer
// path writes dx, dW and db.
cudaError_t Forward(const __half* x, const FusedMlpParams<__half>& p, __half* y, __half* saved,
                    const FusedMlpShape& s, cudaStream_t stream);
cudaError_t Backward(const __half* dy, const __half* x, const __half* y, const __half* saved,
                     const FusedMlpParams<__half>& p, __half* dx, const DzBuffers<__half>& bufs, bool any_wgrad,
                     float* partials, const WsLayout& ws, int* parts, const FusedMlpShape& s,
                     cudaStream_t stream);
// float32 on TF32 tensor cores, fully fused (fused_mlp_mma.cu.cc).
cudaError_t ForwardTf32(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream);
cudaError_t BackwardTf32(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const DzBuffers<float>& bufs, bool any_wgrad,
                         float* partials, const WsLayout& ws, int* parts, const FusedMlpShape& s,
                         cudaStream_t stream);
// The TF32 layer path's ReLU backward through one layer (fused_mlp_layers_tf32.cu.cc):
// out[n, width] = (dz[n, k] W^T) * (h > 0) with W [width, k] row-major and h
// the ReLU's saved output [n, width], products on TF32 tensor cores; with db,
// db[width] = the column sums of out; with dw, dw[width, k] = h^T dz, W's
// gradient, from the same reads of dz and h where the device holds the
// staging (*dw_done says whether it did; if not, the caller forms it). out
// null: dw alone (the lowest layer visited; the same bits). db and
// dw are summed in a fixed order from per-block sums in db_parts
// (kMaxDreluBlocks * width floats) and dw_parts (WsLayout::drelu_dw_off).
// k % 8 == 0, k <= kFusedMlpMaxIoWidth; dz, h and out 8-byte aligned.
// staged_rows: FusedMlpShape::tf32_staged_rows.
cudaError_t DreluProductTf32(const float* dz, int k, const float* w, const float* h, float* out, float* db,
                             float* dw, float* db_parts, float* dw_parts, int64_t n, int width, int staged_rows,
                             bool* dw_done, cudaStream_t stream);
// The TF32 layer path's input layer (fused_mlp_layers_tf32.cu.cc): dx[n, in_dim] =
// dz[n, k] W^T and dw[in_dim, k] = x^T dz (each may be null) in one read of
// dz and x, on TF32 tensor cores, dw summed in a fixed order from dw_parts.
// *done false (nothing queued) where the kernel does not serve the shape or
// the device (in_dim not 16, 32, 64 or 128, x or dz not 16-byte aligned, too
// little shared memory, staged_rows -1): the caller forms dx and dw.
cudaError_t InputBackwardTf32(const float* dz, int k, const float* w, const float* x, float* dx, float* dw,
                              float* dw_parts, int64_t n, int in_dim, int staged_rows, bool* done,
                              cudaStream_t stream);
// float32 layer by layer (fused_mlp_layers.cu.cc): products exact, or on TF32
// tensor cores with s.tf32; `workspace` is the backward's (Layout).
GpuStatus ForwardLayers(const float* x, const FusedMlpParams<float>& p, float* y, float* saved,
                        const FusedMlpShape& s, cudaStream_t stream);
GpuStatus BackwardLayers(const float* dy, const float* x, const float* y, const float* saved,
                         const FusedMlpParams<float>& p, float* dx, const FusedMlpGrads<float>& g, char* workspace,
                         const WsLayout& ws, const FusedMlpShape& s, cudaStream_t stream);

}  // namespace fused_mlp_impl
}  // namespace cuda
}  // namespace mo
#endif  // __CUDACC__

#if defined(MO_CPU_BODIES)
// The CPU FusedMLP (forward and backward), free of TensorFlow: the op's
// functor (fused_mlp_cpu.cc) hands it pointers and a parallel-for;
// tests/fused_mlp_isa builds it for each instruction set, tests/neon for
// arm64 under qemu. A file that wants it defines MO_CPU_BODIES before the
// include, so the other host code of the op needs no SIMD headers.
// Design (docs/FUSED_MLP.md, "CPU kernels"):
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
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/activations_simd.h"  // host
#include "kernels/cpu/simd.h"  // host

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
#endif  // MO_CPU_BODIES

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels of MetalOpsFusedMLP / MetalOpsFusedMLPGrad, once for
// every C++-API device (one kernel class templated on the device, a functor
// per device): the attributes and checks above and the output allocation
// here; FusedMlpFunctor<Device, T> does the work (fused_mlp_cpu.cc: the CPU
// functor, fused_mlp_cuda.cc: the CUDA one; each registers the classes). A
// file that wants them defines MO_TF_KERNEL and includes, before this header,
// TensorFlow's op_kernel.h and tensor.h, kernels/framework/op_kernel_with_attrs.h,
// kernels/spec/checks_tf.h and, where MO_XLA is 1, kernels/xla/xla_ffi.h: this
// header itself reaches no TensorFlow header.

namespace mo {

template <typename T>
struct FusedMlpForwardArgs {
  int64_t n;
  const T* x;
  std::vector<const T*> kernels, biases;  // hidden_layers + 1 each
  T* y;
  T* hidden;  // [hidden_layers, n, width]
};

template <typename T>
struct FusedMlpBackwardArgs {
  int64_t n;
  const T *grad_y, *x, *y, *hidden;
  std::vector<const T*> kernels;
  T* grad_x;
  std::vector<T*> grad_kernels, grad_biases;
};

// Defined per device; n may be 0 (the gradients are then zeros). `hidden` of
// the forward and grad_x / grad_kernels[l] / grad_biases[l] of the backward
// may be null: not wanted.
template <typename Device, typename T>
struct FusedMlpFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const fused_mlp::Net& net,
                              const fused_mlp::Attrs& attrs, const FusedMlpForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const fused_mlp::Net& net,
                               const fused_mlp::Attrs& attrs, const FusedMlpBackwardArgs<T>& args);
};

inline std::vector<checks::Dims> DimsOfList(const ::tensorflow::OpInputList& list) {
  std::vector<checks::Dims> dims;
  for (int i = 0; i < list.size(); ++i) dims.push_back(checks::DimsOf(list[i]));
  return dims;
}

// Output `index` allocated, or left null where the graph consumes it nowhere
// (an inference graph's `hidden`, a gradient no one asked for), and the
// functor skips that work.
template <typename T>
absl::Status AllocateWanted(::tensorflow::OpKernelContext* ctx, int index, const ::tensorflow::TensorShape& shape,
                            T** data) {
  *data = nullptr;
  if (!ctx->output_required(index)) return absl::OkStatus();
  return AllocateOutput(ctx, index, shape, data);
}

template <typename Device, typename T>
class FusedMlpOp : public OpKernelWithAttrs<fused_mlp::Attrs> {
 public:
  using OpKernelWithAttrs<fused_mlp::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& x = ctx->input(0);
    ::tensorflow::OpInputList kernels, biases;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    OP_REQUIRES_OK(ctx, ctx->input_list("biases", &biases));
    fused_mlp::Net net;
    OP_REQUIRES_OK(
        ctx, checks::ToStatus(fused_mlp::Shapes(checks::DimsOf(x), DimsOfList(kernels), DimsOfList(biases), &net)));
    const int64_t n = x.dim_size(0);
    T* y = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 0, ::tensorflow::TensorShape({n, net.out_dim}), &y));
    T* hidden = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 1, ::tensorflow::TensorShape({net.hidden_layers, n, net.width}), &hidden));
    FusedMlpForwardArgs<T> args{n, x.flat<T>().data(), {}, {}, y, hidden};
    for (int l = 0; l < kernels.size(); ++l) {
      args.kernels.push_back(kernels[l].flat<T>().data());
      args.biases.push_back(biases[l].flat<T>().data());
    }
    OP_REQUIRES_OK(ctx, (FusedMlpFunctor<Device, T>::Forward(ctx, net, attrs_, args)));
  }
};

template <typename Device, typename T>
class FusedMlpGradOp : public OpKernelWithAttrs<fused_mlp::Attrs> {
 public:
  using OpKernelWithAttrs<fused_mlp::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& dy = ctx->input(0);
    const ::tensorflow::Tensor& x = ctx->input(1);
    ::tensorflow::OpInputList kernels;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    const ::tensorflow::Tensor& y = ctx->input(2 + kernels.size());
    const ::tensorflow::Tensor& hidden = ctx->input(3 + kernels.size());
    // The biases' shapes follow from the kernels'.
    std::vector<checks::Dims> bias_dims;
    for (int l = 0; l < kernels.size(); ++l) {
      bias_dims.push_back({kernels[l].dims() == 2 ? kernels[l].dim_size(1) : 0});
    }
    fused_mlp::Net net;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::Shapes(checks::DimsOf(x), DimsOfList(kernels), bias_dims, &net)));
    const int64_t n = x.dim_size(0);
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::GradShapes(net, n, checks::DimsOf(dy), checks::DimsOf(y),
                                                               checks::DimsOf(hidden))));
    T* dx = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 0, x.shape(), &dx));
    FusedMlpBackwardArgs<T> args{n, dy.flat<T>().data(), x.flat<T>().data(), y.flat<T>().data(),
                                 hidden.flat<T>().data(), {}, dx, {}, {}};
    // Outputs: grad_x, then grad_kernels[0..N), then grad_biases[0..N).
    const int num = kernels.size();
    for (int l = 0; l < num; ++l) {
      T *dk = nullptr, *db = nullptr;
      OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 1 + l, kernels[l].shape(), &dk));
      OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 1 + num + l, ::tensorflow::TensorShape({kernels[l].dim_size(1)}), &db));
      args.kernels.push_back(kernels[l].flat<T>().data());
      args.grad_kernels.push_back(dk);
      args.grad_biases.push_back(db);
    }
    OP_REQUIRES_OK(ctx, (FusedMlpFunctor<Device, T>::Backward(ctx, net, attrs_, args)));
  }
};

}  // namespace mo

#if defined(MO_XLA) && MO_XLA
#include <utility>

// What FusedMLP's XLA handlers (the host's, fused_mlp_cpu.cc, and the CUDA
// ones, fused_mlp_cuda.cc) share: the call's buffers, the network their
// shapes give (checked again, cheap) and the attributes (MO_XLA_FFI_ATTRS),
// from the call's operands, results and FFI attributes; and the handlers'
// binding.
namespace mo {
namespace xla_ffi {

struct FusedMlpCall {
  std::vector<ffi::AnyBuffer> in;
  std::vector<RetBuffer> out;
  int num = 0;  // layers: kernels (and biases)
  fused_mlp::Net net;
  fused_mlp::Attrs attrs;
};

// The call's buffers and attributes.
inline ffi::Error FusedMlpCallOf(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                                 const fused_mlp::Attrs& attrs, FusedMlpCall* c) {
  ffi::Error error = BuffersOf(args, &c->in);
  if (error.success()) error = BuffersOf(rets, &c->out);
  c->attrs = attrs;
  return error;
}

// The net of x (in[x_at]) and the kernels (in[x_at + 1], ...), the biases'
// shapes given.
inline ffi::Error FusedMlpNetOf(FusedMlpCall* c, int x_at, const std::vector<checks::Dims>& bias_dims) {
  std::vector<checks::Dims> kernel_dims;
  for (int l = 0; l < c->num; ++l) kernel_dims.push_back(DimsOf(c->in[x_at + 1 + l]));
  return ToError(fused_mlp::Shapes(DimsOf(c->in[x_at]), kernel_dims, bias_dims, &c->net));
}

// The forward's call: in x, N kernels, N biases; out y, hidden.
inline ffi::Error FusedMlpForwardOf(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                                    const fused_mlp::Attrs& attrs, FusedMlpCall* c) {
  ffi::Error error = FusedMlpCallOf(args, rets, attrs, c);
  if (error.failure()) return error;
  if (c->in.size() < 3 || c->in.size() % 2 != 1 || c->out.size() != 2) {
    return ffi::Error::Internal("FusedMLP: the XLA call has the wrong number of operands or results");
  }
  c->num = static_cast<int>(c->in.size() / 2);
  std::vector<checks::Dims> bias_dims;
  for (int l = 0; l < c->num; ++l) bias_dims.push_back(DimsOf(c->in[1 + c->num + l]));
  return FusedMlpNetOf(c, 0, bias_dims);
}

// The backward's call: in grad_y, x, N kernels, y, hidden; out grad_x, N
// grad_kernels, N grad_biases. The biases' shapes follow from the kernels'
// (as in the TensorFlow kernel).
inline ffi::Error FusedMlpBackwardOf(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                                     const fused_mlp::Attrs& attrs, FusedMlpCall* c) {
  ffi::Error error = FusedMlpCallOf(args, rets, attrs, c);
  if (error.failure()) return error;
  c->num = static_cast<int>(c->in.size()) - 4;
  if (c->num < 1 || c->out.size() != static_cast<size_t>(1 + 2 * c->num)) {
    return ffi::Error::Internal("FusedMLPGrad: the XLA call has the wrong number of operands or results");
  }
  std::vector<checks::Dims> bias_dims;
  for (int l = 0; l < c->num; ++l) {
    const checks::Dims kernel = DimsOf(c->in[2 + l]);
    bias_dims.push_back({kernel.size() == 2 ? kernel[1] : 0});
  }
  return FusedMlpNetOf(c, 1, bias_dims);
}

// `binding` (XLA's stream and scratch allocator bound, where the handler
// takes them) followed by the operands, results and attributes.
template <typename Binding>
auto BindFusedMlp(Binding&& binding) {
  return std::move(binding).RemainingArgs().RemainingRets().template Attrs<fused_mlp::Attrs>();
}

}  // namespace xla_ffi
}  // namespace mo
#endif  // MO_XLA
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_H_
