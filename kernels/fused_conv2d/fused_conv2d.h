// MetalOpsFusedConv2D: y = act(conv2d(input, filter) + bias + residual), the
// bias, the residual and the activation applied in the convolution's output
// stage; MetalOpsFusedActivationGrad: the activation's derivative for its
// gradient. Written by hand (metal_ops.fused_conv2d) or by the Grappler plugin
// (grappler/fusion_plugin.cc). The formulas are kernels/common/activations.h's.
// This header is the ops' one description shared by every backend: their
// declarations (MO_FUSED_CONV2D_ATTRS, MO_FUSED_ACTIVATION_GRAD_ATTRS) and, in
// host code, the checks (messages name the argument; tests match on them), the
// convolution's geometry (output size, padding), the CPU GEMM's tiles (which
// the Grappler plugin's rule shares), the CUDA launchers' signatures, the
// MPSGraph kernels' rules and, where TensorFlow's headers are (MO_TF_KERNEL),
// the kernel classes. The op's files (docs/ADDING_AN_OP.md):
//   fused_conv2d_op.cc     REGISTER_OP                  fused_conv2d_cpu.cc    CPU kernels, XLA host handlers
//   fused_conv2d.cu.cc     CUDA kernels, launchers      fused_conv2d_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   fused_conv2d_metal.mm  MPSGraph graphs (Obj-C++)    fused_conv2d_metal.cc  tensorflow-metal glue
//   fused_conv2d_xla.cc    XLA op kernels
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/common/activations.h"
#include "kernels/spec/op_attrs.h"

// ---- The ops' declarations (kernels/spec/op_attrs.h) -------------------------------
// The activation's choices, in mo::Activation's order (the Enum's index is the code).
#define MO_FUSED_CONV2D_ACTIVATIONS "none", "relu", "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "swish"
#define MO_FUSED_CONV2D_ALPHA_RANGE -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()
// MetalOpsFusedConv2D(input, filter, bias: num_bias, residual: num_residual) -> output, T float.
#define MO_FUSED_CONV2D_ATTRS(ATTR)                                   \
  ATTR(num_bias, Int64, 0, 0, INT64_MAX)                              \
  ATTR(num_residual, Int64, 0, 0, INT64_MAX)                          \
  ATTR(strides, RequiredIntList, {})                                  \
  ATTR(padding, RequiredEnum, "SAME", "VALID", "EXPLICIT")            \
  ATTR(explicit_paddings, IntList, {})                                \
  ATTR(data_format, Enum, 0, "NHWC")                                  \
  ATTR(dilations, IntList, {1, 1, 1, 1})                              \
  ATTR(activation, Enum, ::mo::kActNone, MO_FUSED_CONV2D_ACTIVATIONS) \
  ATTR(leaky_relu_alpha, Float, 0.2, MO_FUSED_CONV2D_ALPHA_RANGE)
// MetalOpsFusedActivationGrad(gradients, outputs, features: num_features) -> backprops, T float.
#define MO_FUSED_ACTIVATION_GRAD_ATTRS(ATTR)                          \
  ATTR(num_features, Int64, 0, 0, INT64_MAX)                          \
  ATTR(activation, Enum, ::mo::kActNone, MO_FUSED_CONV2D_ACTIVATIONS) \
  ATTR(leaky_relu_alpha, Float, 0.2, MO_FUSED_CONV2D_ALPHA_RANGE)

namespace mo {
namespace fused_conv2d {

// The `padding` attribute's choices, in order.
enum class Padding { kSame, kValid, kExplicit };

// Attrs (the attributes of MetalOpsFusedConv2D), ReadAttrs (their reads, then
// CheckAttrs below), VisitAttrs.
MO_DECLARE_CHECKED_ATTRS("FusedConv2D", MO_FUSED_CONV2D_ATTRS);

// The checks the declaration's kinds leave to the op: the lists' lengths and
// values, padding and explicit_paddings together, the 0-or-1 counts (the
// shape function, the kernels, the Metal glue and XLA's handlers read the
// attributes with ReadAttrs, these checks included).
inline Result CheckAttrs(const Attrs& a) {
  const Dims& strides = a.strides;
  const Dims& dilations = a.dilations;
  const Dims& explicit_paddings = a.explicit_paddings;
  if (a.num_bias > 1) return Invalid("num_bias must be 0 or 1, got ", a.num_bias);
  if (a.num_residual > 1) return Invalid("num_residual must be 0 or 1, got ", a.num_residual);
  if (strides.size() != 4) return Invalid("strides must have 4 elements (NHWC), got ", strides.size());
  if (dilations.size() != 4) return Invalid("dilations must have 4 elements (NHWC), got ", dilations.size());
  if (strides[0] != 1 || strides[3] != 1) {
    return Invalid("strides in the batch and channel dimensions must be 1, got ", ShapeString(strides));
  }
  if (dilations[0] != 1 || dilations[3] != 1) {
    return Invalid("dilations in the batch and channel dimensions must be 1, got ", ShapeString(dilations));
  }
  if (strides[1] <= 0 || strides[2] <= 0) {
    return Invalid("strides must be positive, got [", strides[1], ", ", strides[2], "] for height and width");
  }
  if (dilations[1] <= 0 || dilations[2] <= 0) {
    return Invalid("dilations must be positive, got [", dilations[1], ", ", dilations[2], "] for height and width");
  }
  if (static_cast<Padding>(a.padding) == Padding::kExplicit) {
    if (explicit_paddings.size() != 8) {
      return Invalid("explicit_paddings must have 8 elements when padding is EXPLICIT, got ",
                     explicit_paddings.size());
    }
    for (int64_t p : explicit_paddings) {
      if (p < 0) return Invalid("explicit_paddings must be >= 0, got ", ShapeString(explicit_paddings));
    }
    if (explicit_paddings[0] != 0 || explicit_paddings[1] != 0 || explicit_paddings[6] != 0 ||
        explicit_paddings[7] != 0) {
      return Invalid("explicit_paddings of the batch and channel dimensions must be 0, got ",
                     ShapeString(explicit_paddings));
    }
  } else if (!explicit_paddings.empty()) {
    return Invalid("explicit_paddings must be empty unless padding is EXPLICIT");
  }
  return Ok();
}

// The convolution's window of checked attributes: strides and dilations of
// height and width, the padding (its explicit sizes; SAME's come from the
// input size, in Geometry).
struct Window {
  Padding padding = Padding::kSame;
  int64_t stride_rows = 1, stride_cols = 1, dilation_rows = 1, dilation_cols = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

inline Window WindowOf(const Attrs& a) {
  Window w;
  w.padding = static_cast<Padding>(a.padding);
  w.stride_rows = a.strides[1];
  w.stride_cols = a.strides[2];
  w.dilation_rows = a.dilations[1];
  w.dilation_cols = a.dilations[2];
  if (a.explicit_paddings.size() == 8) {  // EXPLICIT (CheckAttrs)
    w.pad_top = a.explicit_paddings[2];
    w.pad_bottom = a.explicit_paddings[3];
    w.pad_left = a.explicit_paddings[4];
    w.pad_right = a.explicit_paddings[5];
  }
  return w;
}

// One convolution's sizes, NHWC input and HWIO filter.
struct ConvGeometry {
  int64_t batch = 0, in_rows = 0, in_cols = 0, in_depth = 0;
  int64_t filter_rows = 0, filter_cols = 0, out_depth = 0;
  int64_t out_rows = 0, out_cols = 0;
  int64_t stride_rows = 1, stride_cols = 1, dilation_rows = 1, dilation_cols = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;

  int64_t pixels() const { return batch * out_rows * out_cols; }
  // Rows of the patch matrix: KH*KW*Cin.
  int64_t patch_size() const { return filter_rows * filter_cols * in_depth; }
  // No input channels, or an empty input (padding around it may still give an
  // output): the convolution is 0 and only the output stage remains.
  bool contraction_empty() const { return in_depth == 0 || batch * in_rows * in_cols == 0; }
  // 1x1, stride 1, no padding: the input itself is the [pixels, Cin] patch matrix.
  bool input_is_patch_matrix() const {
    return filter_rows == 1 && filter_cols == 1 && stride_rows == 1 && stride_cols == 1 && pad_top == 0 &&
           pad_bottom == 0 && pad_left == 0 && pad_right == 0;
  }
  Dims output_dims() const { return {batch, out_rows, out_cols, out_depth}; }
};

// Output size and padding along one axis, as TensorFlow's Conv2D computes them
// (tensorflow/core/framework/kernel_shape_util.cc, GetWindowedOutputSizeVerbose).
inline Result WindowedOutputSize(const char* axis, int64_t in, int64_t k, int64_t dilation, int64_t stride,
                                 Padding padding, int64_t* out, int64_t* before, int64_t* after) {
  const int64_t effective = (k - 1) * dilation + 1;
  if (padding == Padding::kSame) {
    *out = (in + stride - 1) / stride;
    const int64_t needed = std::max<int64_t>(0, (*out - 1) * stride + effective - in);
    *before = needed / 2;
    *after = needed - *before;
  } else {
    if (padding == Padding::kValid) *before = *after = 0;
    *out = (in + *before + *after - effective + stride) / stride;
  }
  if (*out < 0) {
    return Invalid("input ", axis, " ", in, " is too small for the filter ", axis, " ", k, " (dilation ", dilation,
                   ", stride ", stride, "): the output size would be negative");
  }
  return Ok();
}

// input [N, H, W, Cin], filter [KH, KW, Cin, Cout] -> the geometry.
inline Result Geometry(const Attrs& attrs, const Dims& input, const Dims& filter, ConvGeometry* g) {
  if (input.size() != 4) {
    return Invalid("input must be 4-dimensional [batch, height, width, channels], got shape ", ShapeString(input));
  }
  if (filter.size() != 4) {
    return Invalid("filter must be 4-dimensional [height, width, in_channels, out_channels], got shape ",
                   ShapeString(filter));
  }
  if (filter[2] != input[3]) {
    return Invalid("filter in_channels (", filter[2], ") must equal the input's channels (", input[3],
                   "); input shape ", ShapeString(input), ", filter shape ", ShapeString(filter));
  }
  if (filter[0] <= 0 || filter[1] <= 0) {
    return Invalid("filter height and width must be positive, got shape ", ShapeString(filter));
  }
  g->batch = input[0];
  g->in_rows = input[1];
  g->in_cols = input[2];
  g->in_depth = input[3];
  g->filter_rows = filter[0];
  g->filter_cols = filter[1];
  g->out_depth = filter[3];
  const Window a = WindowOf(attrs);
  g->stride_rows = a.stride_rows;
  g->stride_cols = a.stride_cols;
  g->dilation_rows = a.dilation_rows;
  g->dilation_cols = a.dilation_cols;
  g->pad_top = a.pad_top;
  g->pad_bottom = a.pad_bottom;
  g->pad_left = a.pad_left;
  g->pad_right = a.pad_right;
  MO_RETURN_IF_INVALID(WindowedOutputSize("height", g->in_rows, g->filter_rows, g->dilation_rows, g->stride_rows,
                                          a.padding, &g->out_rows, &g->pad_top, &g->pad_bottom));
  return WindowedOutputSize("width", g->in_cols, g->filter_cols, g->dilation_cols, g->stride_cols, a.padding,
                            &g->out_cols, &g->pad_left, &g->pad_right);
}

// The GEMMs' 32-bit interfaces (OpenBLAS's, cuBLAS's): KH*KW*Cin and Cout
// must fit an int (the pixels are cut into chunks that do).
inline Result GemmSizes(const ConvGeometry& g, const Dims& filter) {
  constexpr int64_t kMaxBlasDim = 2147483647;
  if (g.patch_size() > kMaxBlasDim || g.out_depth > kMaxBlasDim) {
    return Invalid("filter ", ShapeString(filter),
                   " is too large: KH*KW*in_channels and out_channels must be at most 2^31 - 1");
  }
  return Ok();
}

inline Result Bias(const Dims& bias, int64_t out_depth) {
  if (bias != Dims{out_depth}) {
    return Invalid("bias must have shape [", out_depth, "] (the filter's out_channels), got shape ",
                   ShapeString(bias));
  }
  return Ok();
}

inline Result Residual(const Dims& residual, const Dims& output) {
  if (residual != output) {
    return Invalid("residual must have the output's shape ", ShapeString(output), " (no broadcasting), got shape ",
                   ShapeString(residual));
  }
  return Ok();
}

// Every input of MetalOpsFusedConv2D where its GEMMs are BLAS's (the CPU and
// CUDA kernels, XLA's): input and filter (Geometry, GemmSizes), then the bias
// and the residual where the attributes have them. dims(i): input i's dims.
template <typename DimsOfInput>
Result Inputs(const Attrs& attrs, DimsOfInput&& dims, ConvGeometry* g) {
  const Dims filter = dims(1);
  MO_RETURN_IF_INVALID(Geometry(attrs, dims(0), filter, g));
  MO_RETURN_IF_INVALID(GemmSizes(*g, filter));
  if (attrs.num_bias == 1) MO_RETURN_IF_INVALID(Bias(dims(2), g->out_depth));
  if (attrs.num_residual == 1) {
    MO_RETURN_IF_INVALID(Residual(dims(2 + static_cast<int>(attrs.num_bias)), g->output_dims()));
  }
  return Ok();
}

}  // namespace fused_conv2d

namespace fused_activation_grad {

// Attrs (the attributes of MetalOpsFusedActivationGrad), ReadAttrs (their
// reads, then CheckAttrs below), VisitAttrs.
MO_DECLARE_CHECKED_ATTRS("FusedActivationGrad", MO_FUSED_ACTIVATION_GRAD_ATTRS);

// The count's 0 or 1, and the features where the derivative needs them.
inline Result CheckAttrs(const Attrs& a) {
  if (a.num_features > 1) return Invalid("num_features must be 0 or 1, got ", a.num_features);
  if (a.num_features == 0 && !activation_grad_uses_output(a.activation, a.leaky_relu_alpha)) {
    return Invalid("features (the pre-activation) are required for activation '", kActivationNames[a.activation],
                   "' with leaky_relu_alpha ", a.leaky_relu_alpha);
  }
  return Ok();
}

// gradients, outputs and (when given) features have one shape.
inline Result ActivationGradShapes(const Dims& gradients, const Dims& outputs, const Dims* features) {
  if (outputs != gradients) {
    return Invalid("gradients shape ", ShapeString(gradients), " must equal outputs shape ", ShapeString(outputs));
  }
  if (features != nullptr && *features != gradients) {
    return Invalid("features shape ", ShapeString(*features), " must equal gradients shape ",
                   ShapeString(gradients));
  }
  return Ok();
}

// The op's inputs, gradients, outputs and features where the attributes have
// them (ActivationGradShapes). dims(i): input i's dims.
template <typename DimsOfInput>
Result Inputs(const Attrs& attrs, DimsOfInput&& dims) {
  const bool has_features = attrs.num_features == 1;
  const Dims features = has_features ? dims(2) : Dims();
  return ActivationGradShapes(dims(0), dims(1), has_features ? &features : nullptr);
}

}  // namespace fused_activation_grad

// The most output rows a tile of A[rows, k] x B[k, n] -> C[rows, n] can have
// with A, B and C together in half the L2 (the other half for the output
// stage's bias / residual reads and the next tile's patches); negative when
// even B alone does not fit.
inline int64_t l2_tile_max_rows(int64_t k, int64_t n, int64_t l2_bytes) {
  const int64_t budget_floats = l2_bytes / 2 / static_cast<int64_t>(sizeof(float));
  return (budget_floats - k * n) / (k + n);
}

// Tiles smaller than this are not worth a GEMM call each.
constexpr int64_t kMinTileRows = 64;
// Tile height for filters whose [k, n] matrix leaves no room for kMinTileRows
// rows in the L2 budget: large enough that re-packing B once per tile costs
// little next to the tile's 2 * rows * k * n flops.
constexpr int64_t kLargeFilterTileRows = 256;

// Whether a convolution with a [k = KH*KW*Cin, n = Cout] filter matrix and
// `pixels` output pixels (negative: unknown) computes in L2-sized tiles.
inline bool fused_conv_tile_fits_l2(int64_t k, int64_t n, int64_t pixels, int64_t l2_bytes) {
  const int64_t min_rows = pixels >= 0 ? std::min(kMinTileRows, pixels) : kMinTileRows;
  return l2_tile_max_rows(k, n, l2_bytes) >= std::max<int64_t>(min_rows, 1);
}

// Whether the Grappler plugin fuses such a convolution by default: its tile
// fits in L2 and the filter matrix is no taller than wide (k <= n), where the
// GEMM's cost is dominated by the output the fused stage saves passes over
// (the shapes measured on each side of this rule: docs/FUSED_CONV2D.md).
inline bool fused_conv_profitable(int64_t k, int64_t n, int64_t pixels, int64_t l2_bytes) {
  return k <= n && fused_conv_tile_fits_l2(k, n, pixels, l2_bytes);
}

// Output rows per tile: as many as the L2 budget allows (kLargeFilterTileRows
// when it allows too few), but at least one tile per thread.
inline int64_t fused_conv_tile_rows(int64_t k, int64_t n, int64_t pixels, int64_t threads, int64_t l2_bytes) {
  const int64_t budget = fused_conv_tile_fits_l2(k, n, pixels, l2_bytes) ? l2_tile_max_rows(k, n, l2_bytes)
                                                                         : kLargeFilterTileRows;
  const int64_t per_thread = (pixels + std::max<int64_t>(threads, 1) - 1) / std::max<int64_t>(threads, 1);
  return std::max<int64_t>(1, std::min(budget, per_thread));
}

}  // namespace mo

#if defined(__CUDACC__) || GOOGLE_CUDA
// ---- The CUDA launchers (fused_conv2d.cu.cc) ----------------------------------------
// The convolution is a GEMM of the [pixels, KH*KW*Cin] patch matrix and the
// HWIO filter, the [KH*KW*Cin, Cout] matrix as it is (cuBLAS,
// kernels/cuda/cublas_gemm.h), in chunks of output rows: per chunk, the patch
// rows are gathered into a bounded buffer (none for 1x1 stride-1 unpadded
// convolutions, whose input is the patch matrix), multiplied, and the output
// stage act(acc + bias + residual) runs over the chunk's rows right after
// their GEMM, while they are in the GPU's L2 cache. FusedActivationGrad's
// launcher is kernels/cuda/output_stage.h's LaunchFusedActivationGrad.
#include <cuda_runtime.h>

#include "kernels/cuda/cublas_gemm.h"  // host
#include "kernels/cuda/output_stage.h"  // host

namespace mo {
namespace cuda {

// The patch buffer's bound, and the output rows of one chunk (sized for the
// L2 cache of the GPUs TensorFlow's CUDA build targets).
constexpr int64_t kFusedConv2DMaxPatchBytes = int64_t{32} << 20;
constexpr int64_t kFusedConv2DChunkOutputBytes = int64_t{16} << 20;

// How a convolution is cut: chunk_rows output pixels per chunk; patch_floats
// is the patch buffer the chunks need (0 when the input is the patch matrix,
// or nothing is contracted).
struct FusedConv2DPlan {
  int64_t chunk_rows = 0;
  int64_t patch_floats = 0;
};

// As many rows as max_chunk_output_bytes of output (and, gathering patches,
// max_patch_bytes of patch rows) hold, at least one, at most every pixel and
// 2^31 - 1 (cuBLAS's int dimensions). For a non-empty output.
inline FusedConv2DPlan PlanFusedConv2D(const fused_conv2d::ConvGeometry& g,
                                       int64_t max_patch_bytes = kFusedConv2DMaxPatchBytes,
                                       int64_t max_chunk_output_bytes = kFusedConv2DChunkOutputBytes) {
  const int64_t row_bytes = static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(g.out_depth, 1);
  const int64_t patch_row_bytes = static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(g.patch_size(), 1);
  int64_t rows = std::min<int64_t>(g.pixels(), std::numeric_limits<int>::max());
  rows = std::min(rows, max_chunk_output_bytes / row_bytes);
  const bool gather = !g.input_is_patch_matrix() && !g.contraction_empty();
  if (gather) rows = std::min(rows, max_patch_bytes / patch_row_bytes);
  FusedConv2DPlan plan;
  plan.chunk_rows = std::max<int64_t>(rows, 1);
  plan.patch_floats = gather ? plan.chunk_rows * g.patch_size() : 0;
  return plan;
}

struct FusedConv2DParams {
  const float* input;     // [N, H, W, Cin]
  const float* filter;    // [KH, KW, Cin, Cout]
  const float* bias;      // [Cout] or nullptr
  const float* residual;  // the output's shape, or nullptr
  float* output;          // [N, OH, OW, Cout]
  float* patches;         // patch_floats floats (unused when the input is the patch matrix)
  int64_t patch_floats;   // >= chunk_rows * KH*KW*Cin when gathering
  int64_t chunk_rows;     // > 0
  int act;                // mo::Activation
  float alpha;            // leaky_relu's slope
  bool allow_tf32;        // GEMM products on TF32 tensor cores
};

// output = act(conv2d(input, filter) + bias + residual), queued on `stream`
// (the current device's). Sizes as fused_conv2d::Geometry gives them;
// KH*KW*Cin and Cout at most 2^31 - 1. The residual may not alias the output.
GpuStatus LaunchFusedConv2D(const fused_conv2d::ConvGeometry& g, const FusedConv2DParams& params, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo
#endif  // __CUDACC__ || GOOGLE_CUDA

#if !defined(__CUDACC__)
// ---- The MPSGraph kernels (fused_conv2d_metal.cc, fused_conv2d_metal.mm) ------------
// Their decisions as plain C++, unit-tested on machines without Metal
// (tests/metal_shim/metal_rules_shim.cc): the key of a compiled graph, the
// bounded cache of compiled graphs, ELU's expm1 written with the operations
// MPSGraph has; and what the C++ glue asks of the Objective-C++ graphs.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/metal_plan/metal_api.h"  // host

namespace mo {
namespace metal {

// ---- graph keys -------------------------------------------------------------------------

// A float attribute as a key piece: its bit pattern, so values that differ in
// any bit name different graphs (std::to_string's six decimals print 0.1f and
// its neighbours alike).
inline std::string FloatKey(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", static_cast<unsigned>(bits));
  return text;
}

// The key of one compiled graph: the graph's kind (`op`), the GPU (its
// registryID), the attribute pieces it is built from, every input's shape and
// the output's (a graph may bake the output shape into a constant, as the
// convolution with no taps does: its inputs alone do not fix it). Pieces are
// separated so that no two different inputs give one key: '|' between parts,
// '/' after each attribute piece, ',' after each dimension, '>' before the output.
inline std::string GraphKey(const std::string& op, uint64_t device, const std::vector<std::string>& attrs,
                            const std::vector<std::vector<int64_t>>& shapes, const std::vector<int64_t>& output) {
  std::string key = op + "|" + std::to_string(device) + "|";
  for (const std::string& a : attrs) key += a + "/";
  for (const std::vector<int64_t>& shape : shapes) {
    key += "|";
    for (int64_t d : shape) key += std::to_string(d) + ",";
  }
  key += "|>";
  for (int64_t d : output) key += std::to_string(d) + ",";
  return key;
}

// The attribute pieces of MetalOpsFusedConv2D's graphs: every attribute the
// graph is built from.
inline std::vector<std::string> ConvGraphAttrs(const fused_conv2d::Attrs& attrs) {
  const fused_conv2d::Window a = fused_conv2d::WindowOf(attrs);
  std::vector<std::string> pieces;
  for (int64_t v : {static_cast<int64_t>(a.padding), a.stride_rows, a.stride_cols, a.dilation_rows, a.dilation_cols,
                    a.pad_top, a.pad_bottom, a.pad_left, a.pad_right, static_cast<int64_t>(attrs.activation),
                    attrs.num_bias, attrs.num_residual}) {
    pieces.push_back(std::to_string(v));
  }
  pieces.push_back(FloatKey(attrs.leaky_relu_alpha));
  return pieces;
}

// The attribute pieces of MetalOpsFusedActivationGrad's graphs.
inline std::vector<std::string> ActivationGradGraphAttrs(const fused_activation_grad::Attrs& a) {
  return {std::to_string(a.activation), FloatKey(a.leaky_relu_alpha), std::to_string(a.num_features)};
}

// ---- the cache --------------------------------------------------------------------------

// Compiled graphs the process keeps: each distinct key (one per input shape)
// is a compiled MPSGraphExecutable, so a model whose shapes keep changing
// would otherwise grow the cache without end. The bound is far above the
// graphs one training step of a convolutional network uses (one per fused
// layer and shape, forward and activation gradient), so a step that repeats
// keeps every graph it needs.
constexpr size_t kGraphCacheCapacity = 256;

// A map from key to shared value that keeps at most `capacity` entries,
// dropping the least recently used. A dropped value lives on while anyone
// holds it (shared_ptr), so a caller that got it before the drop can finish
// with it. Not thread-safe: the caller locks.
template <typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {}

  // The value of `key`, made by `make()` when absent (`*made` says which); the
  // key becomes the most recently used.
  template <typename Make>
  std::shared_ptr<Value> GetOrMake(const std::string& key, Make make, bool* made = nullptr) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      order_.splice(order_.begin(), order_, found->second);
      if (made != nullptr) *made = false;
      return found->second->second;
    }
    order_.emplace_front(key, make());
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    if (made != nullptr) *made = true;
    return order_.front().second;
  }

  bool Contains(const std::string& key) const { return index_.count(key) != 0; }
  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<Value>>;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
};

// ---- expm1 from graph operations --------------------------------------------------------

// ln(2) / 2, below which (in magnitude) expm1 is its Taylor polynomial.
constexpr float kExpm1TaylorBound = 0.34657359f;

// expm1(z) from the operations of `ops` (MPSGraph has no expm1, and
// exp(z) - 1 loses every digit for small |z|): for |z| <= ln(2)/2 the Taylor
// polynomial to z^8 of kernels/common/platform.h's expm1_f (its unreduced
// case: the first term left out is below 1e-9 relative), elsewhere
// exp(z) - 1, whose subtraction then loses at most a factor 2.5 of exp's own
// error (|exp(z) - 1| >= 1 - sqrt(1/2) against exp(z) <= sqrt(1/2) below,
// and likewise above). `Ops` supplies Value, Constant(float), Add, Sub, Mul,
// Abs, Exp, Greater, LessEqual, Select(predicate, if_true, if_false): graph
// tensors in the Metal kernel, floats in the unit test.
template <typename Ops>
typename Ops::Value Expm1(Ops& ops, typename Ops::Value z) {
  using Value = typename Ops::Value;
  float factorial = 40320.0f;  // 8!
  Value q = ops.Constant(1.0f / factorial);
  for (int n = 7; n >= 2; --n) {
    factorial /= static_cast<float>(n + 1);
    q = ops.Add(ops.Mul(q, z), ops.Constant(1.0f / factorial));
  }
  const Value taylor = ops.Add(ops.Mul(ops.Mul(z, z), q), z);
  const Value from_exp = ops.Sub(ops.Exp(z), ops.Constant(1.0f));
  return ops.Select(ops.LessEqual(ops.Abs(z), ops.Constant(kExpm1TaylorBound)), taylor, from_exp);
}

// ELU (kernels/common/activations.h's activation_forward): z > 0 ? z : expm1(z).
template <typename Ops>
typename Ops::Value Elu(Ops& ops, typename Ops::Value z) {
  return ops.Select(ops.Greater(z, ops.Constant(0.0f)), z, Expm1(ops, z));
}

// One graph: float32 inputs of `input_shapes` to one float32 output of
// `output_shape`.
struct GraphRequest {
  enum Kind {
    kConv,     // act(conv(input, filter) [+ bias] [+ residual])
    kNoTaps,   // act(0 [+ bias] [+ residual]): an empty input or filter sums nothing
    kActGrad,  // gradients * act'(y or z)
  };
  Kind kind = kConv;
  fused_conv2d::Attrs conv;           // kConv, kNoTaps
  fused_activation_grad::Attrs grad;  // kActGrad
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<int64_t> output_shape;
};

// A compiled MPSGraphExecutable and the order of its feeds (defined in the
// Objective-C++ files).
struct CompiledGraph;

// Builds and compiles the graph on `device`; nullptr with *error set when
// MPSGraph cannot.
std::shared_ptr<CompiledGraph> CompileGraph(const GraphRequest& request, mtl::Device& device, std::string* error);

// Encodes `graph` on the stream's command buffer over the buffers of its
// inputs (in GraphRequest::input_shapes' order) and output: "" or why
// nothing was encoded. The command buffer keeps `graph` alive until it
// completes.
std::string EncodeGraph(const std::shared_ptr<CompiledGraph>& graph, mtl::CommandBuffer& command_buffer,
                        const std::vector<mtl::Buffer*>& inputs, mtl::Buffer& output);

}  // namespace metal
}  // namespace mo
#endif  // !__CUDACC__

#if defined(MO_TF_KERNEL)
// ---- The TensorFlow kernels -------------------------------------------------------
// Once for every C++-API device (one kernel class templated on the device, a
// functor per device): the checks above and the output allocation here;
// FusedConv2DFunctor<Device> and FusedActivationGradFunctor<Device> do the work
// (fused_conv2d_cpu.cc, fused_conv2d_cuda.cc, which define MO_TF_KERNEL before
// including this header). The section includes nothing, so the header stays
// free of TensorFlow: its includer has included TensorFlow's op_kernel.h,
// kernels/framework/op_kernel_with_attrs.h and kernels/spec/checks_tf.h (and,
// with MO_XLA, kernels/xla/xla_ffi_attrs.h) first.

namespace mo {

// One call of MetalOpsFusedConv2D, checked: float32 NHWC input, HWIO filter,
// bias ([Cout]) and residual (the output's shape) or nullptr.
struct FusedConv2DArgs {
  fused_conv2d::ConvGeometry g;
  const float* input;
  const float* filter;
  const float* bias;
  const float* residual;
  int act;
  float alpha;
};

// Defined per device.
template <typename Device>
struct FusedConv2DFunctor {
  // output = act(conv2d(input, filter) + bias + residual) for a non-empty
  // output; the contraction may be empty (no input channels, or an empty
  // input with padding around it): the convolution is then 0.
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const FusedConv2DArgs& args, float* output);
};

template <typename Device>
struct FusedActivationGradFunctor {
  // backprops[i] = gradients[i] * act'(z[i]) for n > 0 elements, from features
  // (z) when not nullptr, else from outputs (y = act(z)). backprops may be
  // gradients (element i is read before it is written).
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const float* gradients, const float* outputs,
                              const float* features, int64_t n, int act, float alpha, float* backprops);
};

template <typename Device>
class FusedConv2DOp : public OpKernelWithAttrs<fused_conv2d::Attrs> {
 public:
  using OpKernelWithAttrs<fused_conv2d::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    FusedConv2DArgs args{};
    auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Inputs(attrs_, dims, &args.g)));
    const fused_conv2d::ConvGeometry& g = args.g;
    const ::tensorflow::TensorShape out_shape({g.batch, g.out_rows, g.out_cols, g.out_depth});
    auto data = [&](int i) { return ctx->input(i).flat<float>().data(); };
    if (attrs_.num_bias == 1) args.bias = data(2);
    if (attrs_.num_residual == 1) args.residual = data(2 + attrs_.num_bias);
    float* output = nullptr;
    OP_REQUIRES_OK(ctx, AllocateOutput(ctx, 0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;
    args.input = data(0);
    args.filter = data(1);
    args.act = attrs_.activation;
    args.alpha = attrs_.leaky_relu_alpha;
    OP_REQUIRES_OK(ctx, FusedConv2DFunctor<Device>::Compute(ctx, args, output));
  }
};

template <typename Device>
class FusedActivationGradOp : public OpKernelWithAttrs<fused_activation_grad::Attrs> {
 public:
  using OpKernelWithAttrs<fused_activation_grad::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_activation_grad::Inputs(attrs_, dims)));
    const ::tensorflow::Tensor& grads = ctx->input(0);
    const ::tensorflow::Tensor& outputs = ctx->input(1);
    const ::tensorflow::Tensor* features = attrs_.num_features == 1 ? &ctx->input(2) : nullptr;
    // In place over the incoming gradients when nothing else holds them (as
    // TF's ReluGrad does): no fresh buffer to fault in.
    ::tensorflow::Tensor* backprops = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, grads.shape(), &backprops));
    const int64_t n = grads.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, FusedActivationGradFunctor<Device>::Compute(
                            ctx, grads.flat<float>().data(), outputs.flat<float>().data(),
                            features != nullptr ? features->flat<float>().data() : nullptr, n, attrs_.activation,
                            attrs_.leaky_relu_alpha, backprops->flat<float>().data()));
  }
};

}  // namespace mo

#if defined(MO_XLA) && MO_XLA
// ---- What XLA's handlers share (fused_conv2d_cpu.cc's host ones, fused_conv2d_cuda.cc's CUDA ones)
// The attributes bound whole (kernels/xla/xla_ffi_attrs.h); FusedConv2D's
// arguments and geometry rebuilt from them and the buffers' shapes;
// FusedActivationGrad's optional features; the bindings.
MO_XLA_FFI_ATTRS(::mo::fused_conv2d::Attrs);
MO_XLA_FFI_ATTRS(::mo::fused_activation_grad::Attrs);

namespace mo {
namespace xla_ffi {

// input [N, H, W, Cin], filter [KH, KW, Cin, Cout], then bias and residual
// where num_bias / num_residual.
inline ffi::Error FusedConv2DArgsOf(const ffi::AnyBuffer& input, const ffi::AnyBuffer& filter,
                                    const ffi::RemainingArgs& rest, const fused_conv2d::Attrs& a,
                                    FusedConv2DArgs* args) {
  std::vector<ffi::AnyBuffer> extra;
  ffi::Error error = BuffersOf(rest, &extra);
  if (error.failure()) return error;
  if (extra.size() != static_cast<size_t>(a.num_bias + a.num_residual)) {
    return ffi::Error::Internal("FusedConv2D: the XLA call has the wrong number of operands");
  }
  const auto in = input.dimensions(), f = filter.dimensions();
  *args = FusedConv2DArgs{};
  const Result geometry = fused_conv2d::Geometry(a, Dims(in.begin(), in.end()), Dims(f.begin(), f.end()), &args->g);
  if (!geometry.ok) return ffi::Error::InvalidArgument(geometry.message);
  args->input = Data<float>(input);
  args->filter = Data<float>(filter);
  args->bias = a.num_bias == 1 ? Data<float>(extra[0]) : nullptr;
  args->residual = a.num_residual == 1 ? Data<float>(extra[a.num_bias]) : nullptr;
  args->act = a.activation;
  args->alpha = a.leaky_relu_alpha;
  return ffi::Error::Success();
}

// `binding` (XLA's stream and scratch allocator bound, where the handler
// takes them) followed by the buffers of both ops: two operands (input and
// filter; gradients and outputs), the optional ones (bias, residual;
// features), one result, then the attributes.
template <typename Attrs, typename Binding>
auto BindConvBuffers(Binding&& binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .template Ret<ffi::AnyBuffer>()
      .template Attrs<Attrs>();
}

// FusedActivationGrad's features: the optional third operand, else nullptr.
inline ffi::Error ActivationFeaturesOf(const ffi::RemainingArgs& rest, const float** features) {
  std::vector<ffi::AnyBuffer> extra;
  ffi::Error error = BuffersOf(rest, &extra);
  *features = extra.empty() ? nullptr : Data<float>(extra[0]);
  return error;
}

}  // namespace xla_ffi
}  // namespace mo
#endif  // MO_XLA
#endif  // MO_TF_KERNEL

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_H_
