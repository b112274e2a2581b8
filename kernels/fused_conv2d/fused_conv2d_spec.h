// MetalOpsFusedConv2D's and MetalOpsFusedActivationGrad's attributes, input
// checks and the convolution's geometry (output size, padding), written once
// for the shape functions and the CPU kernel (through kernels/spec/checks_tf.h) and
// the Metal kernel (through KernelCall::Check / AttrReader::Check). No TensorFlow API: sizes and
// attribute values in, kernels/spec/checks.h's Result out. Messages name the argument;
// tests match on them.
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_SPEC_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_SPEC_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/common/activations.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace fused_conv2d {

// The `activation` attr values, indexed by mo::Activation.
constexpr int kNumActivations = 8;
constexpr const char* kActivationNames[kNumActivations] = {"none",       "relu",    "relu6", "elu",
                                                           "leaky_relu", "sigmoid", "tanh",  "swish"};

inline Result ParseActivation(const std::string& name, int* act) {
  for (int i = 0; i < kNumActivations; ++i) {
    if (name == kActivationNames[i]) {
      *act = i;
      return Ok();
    }
  }
  return Invalid("unknown activation '", name, "'");
}

enum class Padding { kSame, kValid, kExplicit };

// The attributes of MetalOpsFusedConv2D, validated.
struct ConvAttrs {
  int64_t num_bias = 0, num_residual = 0;
  int64_t stride_rows = 1, stride_cols = 1, dilation_rows = 1, dilation_cols = 1;
  Padding padding = Padding::kSame;
  // EXPLICIT padding only (SAME's is computed per input size).
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int act = kActNone;
  float alpha = 0.2f;
};

inline Result CheckConvAttrs(int64_t num_bias, int64_t num_residual, const Dims& strides, const Dims& dilations,
                             const std::string& padding, const Dims& explicit_paddings,
                             const std::string& data_format, const std::string& activation, float alpha,
                             ConvAttrs* a) {
  if (num_bias < 0 || num_bias > 1) return Invalid("num_bias must be 0 or 1, got ", num_bias);
  if (num_residual < 0 || num_residual > 1) return Invalid("num_residual must be 0 or 1, got ", num_residual);
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
  if (data_format != "NHWC") return Invalid("data_format must be NHWC, got ", data_format);
  if (padding == "SAME") {
    a->padding = Padding::kSame;
  } else if (padding == "VALID") {
    a->padding = Padding::kValid;
  } else if (padding == "EXPLICIT") {
    a->padding = Padding::kExplicit;
  } else {
    return Invalid("padding must be SAME, VALID or EXPLICIT, got ", padding);
  }
  if (a->padding == Padding::kExplicit) {
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
    a->pad_top = explicit_paddings[2];
    a->pad_bottom = explicit_paddings[3];
    a->pad_left = explicit_paddings[4];
    a->pad_right = explicit_paddings[5];
  } else if (!explicit_paddings.empty()) {
    return Invalid("explicit_paddings must be empty unless padding is EXPLICIT");
  }
  MO_RETURN_IF_INVALID(ParseActivation(activation, &a->act));
  a->num_bias = num_bias;
  a->num_residual = num_residual;
  a->stride_rows = strides[1];
  a->stride_cols = strides[2];
  a->dilation_rows = dilations[1];
  a->dilation_cols = dilations[2];
  a->alpha = alpha;
  return Ok();
}

// Reads (kernels/spec/checks.h ReadEach) and checks MetalOpsFusedConv2D's attributes:
// the one attribute read of its shape function, CPU kernel and Metal kernel.
template <typename Get>
Result ReadAttrs(Get&& get, ConvAttrs* a) {
  int64_t num_bias = 0, num_residual = 0;
  Dims strides, dilations, explicit_paddings;
  std::string padding, data_format, activation;
  float alpha = 0.2f;
  MO_RETURN_IF_INVALID(checks::ReadEach(get, "FusedConv2D", "num_bias", &num_bias, "num_residual", &num_residual,
                                        "strides", &strides, "dilations", &dilations, "padding", &padding,
                                        "explicit_paddings", &explicit_paddings, "data_format", &data_format,
                                        "activation", &activation, "leaky_relu_alpha", &alpha));
  return CheckConvAttrs(num_bias, num_residual, strides, dilations, padding, explicit_paddings, data_format,
                        activation, alpha, a);
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
inline Result Geometry(const ConvAttrs& a, const Dims& input, const Dims& filter, ConvGeometry* g) {
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

// MetalOpsFusedActivationGrad's attributes.
struct ActivationGradAttrs {
  int act = kActNone;
  float alpha = 0.2f;
  int64_t num_features = 0;
};

// Reads (kernels/spec/checks.h ReadEach) and checks MetalOpsFusedActivationGrad's
// attributes: the one attribute read of its shape function, CPU kernel and
// Metal kernel.
template <typename Get>
Result ReadAttrs(Get&& get, ActivationGradAttrs* a) {
  std::string activation;
  MO_RETURN_IF_INVALID(checks::ReadEach(get, "FusedActivationGrad", "activation", &activation, "leaky_relu_alpha",
                                        &a->alpha, "num_features", &a->num_features));
  MO_RETURN_IF_INVALID(ParseActivation(activation, &a->act));
  if (a->num_features < 0 || a->num_features > 1) return Invalid("num_features must be 0 or 1, got ", a->num_features);
  if (a->num_features == 0 && !activation_grad_uses_output(a->act, a->alpha)) {
    return Invalid("features (the pre-activation) are required for activation '", activation,
                   "' with leaky_relu_alpha ", a->alpha);
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

}  // namespace fused_conv2d
}  // namespace mo

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_SPEC_H_
