// The CPU registrations of ZeroOut: the kernel class kernels/zero_out/zero_out_kernel.h
// with the CPU functor of kernels/zero_out/zero_out_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/zero_out/zero_out_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/zero_out/zero_out_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

MO_REGISTER("ZeroOut", DEVICE_CPU, int32_t, ZeroOutOp<CPUDevice, int32_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, int64_t, ZeroOutOp<CPUDevice, int64_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, float, ZeroOutOp<CPUDevice, float>);
MO_REGISTER("ZeroOut", DEVICE_CPU, double, ZeroOutOp<CPUDevice, double>);


}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/zero_out/zero_out_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Compute(ffi::AnyBuffer in, RetBuffer out, int64_t preserve_index) {
  const int64_t n = static_cast<int64_t>(in.element_count());
  return xla_ffi::ForTypeUnlessEmpty<int32_t, int64_t, float, double>(in.element_type(), n, "ZeroOut", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(ZeroOutFunctor<Eigen::ThreadPoolDevice, T>::Compute(HostContext(), Data<T>(in),
                                                                                 Data<T>(out), n, preserve_index));
  });
}

MO_XLA_FFI_HANDLER("ZeroOut", "Host", Compute, xla_ffi::BindBuffers<1, 1>().Attr<int64_t>("preserve_index"));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
