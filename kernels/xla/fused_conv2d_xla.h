// What FusedConv2D's XLA handlers (the host's, kernels/xla/fused_conv2d_xla.cc,
// and the CUDA one, fused_conv2d_xla_gpu.cc) share: the call's arguments and
// geometry rebuilt from its FFI attributes (the padding resolved while XLA
// compiled) and its buffers' shapes; and their FFI attributes.
#ifndef MO_KERNELS_XLA_FUSED_CONV2D_XLA_H_
#define MO_KERNELS_XLA_FUSED_CONV2D_XLA_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/fused_conv2d_kernel.h"
#include "kernels/spec/fused_conv2d_spec.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {

// input [N, H, W, Cin], filter [KH, KW, Cin, Cout], then bias and residual
// where has_bias / has_residual; output [N, OH, OW, Cout].
inline ffi::Error FusedConv2DArgsOf(const ffi::AnyBuffer& input, const ffi::AnyBuffer& filter,
                                    const ffi::RemainingArgs& rest, RetBuffer output, int64_t has_bias,
                                    int64_t has_residual, int64_t stride_rows, int64_t stride_cols,
                                    int64_t dilation_rows, int64_t dilation_cols, int64_t pad_top, int64_t pad_bottom,
                                    int64_t pad_left, int64_t pad_right, int64_t activation, float alpha,
                                    FusedConv2DArgs* args) {
  std::vector<ffi::AnyBuffer> extra;
  ffi::Error error = BuffersOf(rest, &extra);
  if (error.failure()) return error;
  if (extra.size() != static_cast<size_t>(has_bias + has_residual)) {
    return ffi::Error::Internal("FusedConv2D: the XLA call has the wrong number of operands");
  }
  const auto in = input.dimensions(), f = filter.dimensions(), out = output->dimensions();
  *args = FusedConv2DArgs{};
  fused_conv2d::ConvGeometry& g = args->g;
  g.batch = in[0], g.in_rows = in[1], g.in_cols = in[2], g.in_depth = in[3];
  g.filter_rows = f[0], g.filter_cols = f[1], g.out_depth = f[3];
  g.out_rows = out[1], g.out_cols = out[2];
  g.stride_rows = stride_rows, g.stride_cols = stride_cols;
  g.dilation_rows = dilation_rows, g.dilation_cols = dilation_cols;
  g.pad_top = pad_top, g.pad_bottom = pad_bottom, g.pad_left = pad_left, g.pad_right = pad_right;
  args->input = Data<float>(input);
  args->filter = Data<float>(filter);
  args->bias = has_bias ? Data<float>(extra[0]) : nullptr;
  args->residual = has_residual ? Data<float>(extra[has_bias]) : nullptr;
  args->act = static_cast<int>(activation);
  args->alpha = alpha;
  return ffi::Error::Success();
}

// FusedConv2D's attributes after its buffers (kernels/xla/fused_conv2d_xla.cc's FfiAttrs).
template <typename Binding>
auto BindConvAttrs(Binding binding) {
  return std::move(binding)
      .template Attr<int64_t>("has_bias")
      .template Attr<int64_t>("has_residual")
      .template Attr<int64_t>("stride_rows")
      .template Attr<int64_t>("stride_cols")
      .template Attr<int64_t>("dilation_rows")
      .template Attr<int64_t>("dilation_cols")
      .template Attr<int64_t>("pad_top")
      .template Attr<int64_t>("pad_bottom")
      .template Attr<int64_t>("pad_left")
      .template Attr<int64_t>("pad_right")
      .template Attr<int64_t>("activation")
      .template Attr<float>("alpha");
}

}  // namespace xla_ffi
}  // namespace mo

#endif  // MO_KERNELS_XLA_FUSED_CONV2D_XLA_H_
