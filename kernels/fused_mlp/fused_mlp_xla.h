// What FusedMLP's XLA handlers (the host's, kernels/fused_mlp/fused_mlp_xla.cc,
// and the CUDA one, fused_mlp_xla_gpu.cc) share: the call's buffers, the
// network their shapes give (checked again by the spec, cheap) and the
// attributes, from the call's operands, results and FFI attributes; and the
// handlers' binding.
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_XLA_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_XLA_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/fused_mlp/fused_mlp_spec.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// The call's FFI attributes (kernels/fused_mlp/fused_mlp_xla.cc's FfiAttrs), which
// XLA decodes by name (XLA_FFI_REGISTER_STRUCT_ATTR_DECODING below).
struct FusedMlpCallAttrs {
  int64_t activation, output_activation;
  float leaky_relu_alpha;
};

struct FusedMlpCall {
  std::vector<ffi::AnyBuffer> in;
  std::vector<RetBuffer> out;
  int num = 0;  // layers: kernels (and biases)
  fused_mlp::Net net;
  fused_mlp::Attrs attrs;
};

// The call's buffers and attributes.
inline ffi::Error FusedMlpCallOf(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                                 const FusedMlpCallAttrs& attrs, FusedMlpCall* c) {
  ffi::Error error = BuffersOf(args, &c->in);
  if (error.success()) error = BuffersOf(rets, &c->out);
  c->attrs.activation = static_cast<int>(attrs.activation);
  c->attrs.output_activation = static_cast<int>(attrs.output_activation);
  c->attrs.leaky_relu_alpha = attrs.leaky_relu_alpha;
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
                                    const FusedMlpCallAttrs& attrs, FusedMlpCall* c) {
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
                                     const FusedMlpCallAttrs& attrs, FusedMlpCall* c) {
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
  return std::move(binding).RemainingArgs().RemainingRets().template Attrs<FusedMlpCallAttrs>();
}

}  // namespace xla_ffi
}  // namespace mo

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::mo::xla_ffi::FusedMlpCallAttrs,
                                      ::xla::ffi::StructMember<int64_t>("activation"),
                                      ::xla::ffi::StructMember<int64_t>("output_activation"),
                                      ::xla::ffi::StructMember<float>("leaky_relu_alpha"));

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_XLA_H_
