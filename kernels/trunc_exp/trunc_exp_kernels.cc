// The CPU registrations of MetalOpsTruncExp / MetalOpsTruncExpGrad: the kernel
// class kernels/trunc_exp/trunc_exp_kernel.h with the CPU functor of
// kernels/trunc_exp/trunc_exp_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/trunc_exp/trunc_exp_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/trunc_exp/trunc_exp_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

MO_REGISTER_CPU_WITH_GRAD("MetalOpsTruncExp", TruncExp, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsTruncExp", TruncExp, Eigen::half);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/trunc_exp/trunc_exp_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Forward(ffi::AnyBuffer x, RetBuffer y) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExp", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(
        TruncExpFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), Data<T>(x), n, Data<T>(y)));
  });
}

ffi::Error Backward(ffi::AnyBuffer dy, ffi::AnyBuffer x, RetBuffer dx) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExpGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(TruncExpFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), Data<T>(dy),
                                                                                   Data<T>(x), n, Data<T>(dx)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsTruncExp", "Host", Forward, xla_ffi::BindBuffers<1, 1>());
MO_XLA_FFI_HANDLER("MetalOpsTruncExpGrad", "Host", Backward, xla_ffi::BindBuffers<2, 1>());

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
