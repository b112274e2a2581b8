// What the XLA handlers of FusedConv2D and FusedActivationGrad (the host's,
// kernels/fused_conv2d/fused_conv2d_xla.cc, and the CUDA ones, fused_conv2d_xla_gpu.cc)
// share: FusedConv2D's arguments and geometry rebuilt from its FFI attributes
// (the padding resolved while XLA compiled) and its buffers' shapes,
// FusedActivationGrad's optional features; and their bindings.
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_XLA_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_XLA_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/fused_conv2d/fused_conv2d_kernel.h"
#include "kernels/fused_conv2d/fused_conv2d_spec.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// FusedConv2D's FFI attributes (kernels/fused_conv2d/fused_conv2d_xla.cc's FfiAttrs),
// which XLA decodes by name (XLA_FFI_REGISTER_STRUCT_ATTR_DECODING below).
struct ConvCallAttrs {
  int64_t has_bias, has_residual;
  int64_t stride_rows, stride_cols, dilation_rows, dilation_cols;
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t activation;
  float alpha;
};

// input [N, H, W, Cin], filter [KH, KW, Cin, Cout], then bias and residual
// where has_bias / has_residual; output [N, OH, OW, Cout].
inline ffi::Error FusedConv2DArgsOf(const ffi::AnyBuffer& input, const ffi::AnyBuffer& filter,
                                    const ffi::RemainingArgs& rest, RetBuffer output, const ConvCallAttrs& a,
                                    FusedConv2DArgs* args) {
  std::vector<ffi::AnyBuffer> extra;
  ffi::Error error = BuffersOf(rest, &extra);
  if (error.failure()) return error;
  if (extra.size() != static_cast<size_t>(a.has_bias + a.has_residual)) {
    return ffi::Error::Internal("FusedConv2D: the XLA call has the wrong number of operands");
  }
  const auto in = input.dimensions(), f = filter.dimensions(), out = output->dimensions();
  *args = FusedConv2DArgs{};
  fused_conv2d::ConvGeometry& g = args->g;
  g.batch = in[0], g.in_rows = in[1], g.in_cols = in[2], g.in_depth = in[3];
  g.filter_rows = f[0], g.filter_cols = f[1], g.out_depth = f[3];
  g.out_rows = out[1], g.out_cols = out[2];
  g.stride_rows = a.stride_rows, g.stride_cols = a.stride_cols;
  g.dilation_rows = a.dilation_rows, g.dilation_cols = a.dilation_cols;
  g.pad_top = a.pad_top, g.pad_bottom = a.pad_bottom, g.pad_left = a.pad_left, g.pad_right = a.pad_right;
  args->input = Data<float>(input);
  args->filter = Data<float>(filter);
  args->bias = a.has_bias ? Data<float>(extra[0]) : nullptr;
  args->residual = a.has_residual ? Data<float>(extra[a.has_bias]) : nullptr;
  args->act = static_cast<int>(a.activation);
  args->alpha = a.alpha;
  return ffi::Error::Success();
}

// `binding` (XLA's stream and scratch allocator bound, where the handler
// takes them) followed by the buffers of both ops: two operands (input and
// filter; gradients and outputs), the optional ones (bias, residual;
// features), one result.
template <typename Binding>
auto BindConvBuffers(Binding&& binding) {
  return std::move(binding)
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .template Ret<ffi::AnyBuffer>();
}

// FusedConv2D's handlers' binding: the buffers, then the attributes.
template <typename Binding>
auto BindConv(Binding&& binding) {
  return BindConvBuffers(std::move(binding)).template Attrs<ConvCallAttrs>();
}

// FusedActivationGrad's handlers' binding.
template <typename Binding>
auto BindActivationGrad(Binding&& binding) {
  return BindConvBuffers(std::move(binding)).template Attr<int64_t>("activation").template Attr<float>("alpha");
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

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::mo::xla_ffi::ConvCallAttrs, ::xla::ffi::StructMember<int64_t>("has_bias"),
                                      ::xla::ffi::StructMember<int64_t>("has_residual"),
                                      ::xla::ffi::StructMember<int64_t>("stride_rows"),
                                      ::xla::ffi::StructMember<int64_t>("stride_cols"),
                                      ::xla::ffi::StructMember<int64_t>("dilation_rows"),
                                      ::xla::ffi::StructMember<int64_t>("dilation_cols"),
                                      ::xla::ffi::StructMember<int64_t>("pad_top"),
                                      ::xla::ffi::StructMember<int64_t>("pad_bottom"),
                                      ::xla::ffi::StructMember<int64_t>("pad_left"),
                                      ::xla::ffi::StructMember<int64_t>("pad_right"),
                                      ::xla::ffi::StructMember<int64_t>("activation"),
                                      ::xla::ffi::StructMember<float>("alpha"));

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_XLA_H_
