// FusedMLP's attribute and shape checks, written once for every kernel of the
// op (CPU, CUDA, Metal) and its shape function, and the one definition of the
// network sizes the kernels run (the CUDA launchers read them too). No
// TensorFlow API: sizes and names in, kernels/spec/checks.h's Result out.
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_SPEC_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/activations.h"
#include "kernels/spec/checks.h"

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

struct Attrs {
  int activation = kActRelu;
  int output_activation = kActNone;
  float leaky_relu_alpha = 0.2f;
};

inline bool HiddenActivationOk(int act) {
  return act == kActNone || act == kActRelu || act == kActLeakyRelu || act == kActSigmoid || act == kActSoftplus;
}

// The activation names; output_activation may also be trunc_exp.
inline Result ParseAttrs(const std::string& activation, const std::string& output_activation, float alpha,
                         Attrs* a) {
  a->activation = activation_from_name(activation.c_str());
  if (!HiddenActivationOk(a->activation)) {
    return Invalid("FusedMLP: 'activation' must be none, relu, leaky_relu, sigmoid or softplus, got '", activation,
                   "'");
  }
  a->output_activation = activation_from_name(output_activation.c_str());
  if (!HiddenActivationOk(a->output_activation) && a->output_activation != kActTruncExp) {
    return Invalid("FusedMLP: 'output_activation' must be none, relu, leaky_relu, sigmoid, softplus or trunc_exp, "
                   "got '", output_activation, "'");
  }
  if (!(alpha >= 0.0f && alpha < 1.0f)) {
    return Invalid("FusedMLP: 'leaky_relu_alpha' must be in [0, 1) (the backward reads the slope from the output), "
                   "got ", alpha);
  }
  a->leaky_relu_alpha = alpha;
  return Ok();
}

// Reads (kernels/spec/checks.h ReadEach) and parses the attributes: the one attribute
// read of the shape function, the kernel classes and the Metal kernels of
// FusedMLP and FusedMLPGrad. (N, the number of kernels, is the inputs' list
// length: the kernels read it from their inputs.)
template <typename Get>
Result ReadAttrs(Get&& get, Attrs* a) {
  std::string activation, output_activation;
  float alpha = 0.0f;
  MO_RETURN_IF_INVALID(checks::ReadEach(get, "FusedMLP", "activation", &activation, "output_activation",
                                        &output_activation, "leaky_relu_alpha", &alpha));
  return ParseAttrs(activation, output_activation, alpha, a);
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
  if (net->in_dim < 1 || net->in_dim > kMaxIoWidth || net->out_dim < 1 || net->out_dim > kMaxIoWidth) {
    return Invalid("FusedMLP: input and output widths must be in [1, ", kMaxIoWidth, "], got ", net->in_dim,
                   " and ", net->out_dim);
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

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_SPEC_H_
