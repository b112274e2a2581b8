// The CPU registrations of MetalOpsFusedMLP / MetalOpsFusedMLPGrad: the kernel
// class kernels/fused_mlp/fused_mlp_kernel.h with the CPU functor of
// kernels/fused_mlp/fused_mlp_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/fused_mlp/fused_mlp_functor.h"  // first: it includes the intrinsics headers, then kernels/framework/tf_eigen.h

#include "kernels/fused_mlp/fused_mlp_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include <vector>

#if MO_XLA
#include "kernels/fused_mlp/fused_mlp_xla.h"
#endif

MO_REGISTER_CPU_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, Eigen::half);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/fused_mlp/fused_mlp_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Forward(ffi::RemainingArgs args, ffi::RemainingRets rets, xla_ffi::FusedMlpCallAttrs attrs) {
  xla_ffi::FusedMlpCall c;
  ffi::Error error = xla_ffi::FusedMlpForwardOf(args, rets, attrs, &c);
  if (error.failure()) return error;
  const std::vector<ffi::AnyBuffer>& in = c.in;
  return xla_ffi::ForType<float, Eigen::half>(in[0].element_type(), "FusedMLP", [&](auto type) {
    using T = decltype(type);
    FusedMlpForwardArgs<T> a{static_cast<int64_t>(in[0].dimensions()[0]), Data<T>(in[0]), {}, {}, Data<T>(c.out[0]),
                             Data<T>(c.out[1])};
    for (int l = 0; l < c.num; ++l) {
      a.kernels.push_back(Data<T>(in[1 + l]));
      a.biases.push_back(Data<T>(in[1 + c.num + l]));
    }
    return xla_ffi::ToError(FusedMlpFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), c.net, c.attrs, a));
  });
}

ffi::Error Backward(ffi::RemainingArgs args, ffi::RemainingRets rets, xla_ffi::FusedMlpCallAttrs attrs) {
  xla_ffi::FusedMlpCall c;
  ffi::Error error = xla_ffi::FusedMlpBackwardOf(args, rets, attrs, &c);
  if (error.failure()) return error;
  const std::vector<ffi::AnyBuffer>& in = c.in;
  const int num = c.num;
  return xla_ffi::ForType<float, Eigen::half>(in[1].element_type(), "FusedMLPGrad", [&](auto type) {
    using T = decltype(type);
    FusedMlpBackwardArgs<T> a{static_cast<int64_t>(in[1].dimensions()[0]),
                              Data<T>(in[0]),
                              Data<T>(in[1]),
                              Data<T>(in[2 + num]),
                              Data<T>(in[3 + num]),
                              {},
                              Data<T>(c.out[0]),
                              {},
                              {}};
    for (int l = 0; l < num; ++l) {
      a.kernels.push_back(Data<T>(in[2 + l]));
      a.grad_kernels.push_back(Data<T>(c.out[1 + l]));
      a.grad_biases.push_back(Data<T>(c.out[1 + num + l]));
    }
    return xla_ffi::ToError(FusedMlpFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), c.net, c.attrs, a));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsFusedMLP", "Host", Forward, xla_ffi::BindFusedMlp(ffi::Ffi::Bind()));
MO_XLA_FFI_HANDLER("MetalOpsFusedMLPGrad", "Host", Backward, xla_ffi::BindFusedMlp(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
