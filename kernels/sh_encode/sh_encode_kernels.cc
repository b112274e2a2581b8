// The CPU registrations of MetalOpsSHEncode / MetalOpsSHEncodeGrad: the kernel
// class kernels/sh_encode/sh_encode_kernel.h with the CPU functor of
// kernels/sh_encode/sh_encode_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/sh_encode/sh_encode_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/sh_encode/sh_encode_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

MO_REGISTER_CPU_WITH_GRAD("MetalOpsSHEncode", SHEncode, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsSHEncode", SHEncode, Eigen::half);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/sh_encode/sh_encode_xla.cc emits.
namespace mo::xla_kernels {
namespace {

// The directions [N, 3]: N.
int64_t Count(const ffi::AnyBuffer& dirs) { return static_cast<int64_t>(dirs.element_count()) / 3; }

ffi::Error Forward(ffi::AnyBuffer dirs, RetBuffer values, int64_t degree) {
  const int64_t n = Count(dirs);
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncode", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(SHEncodeFunctor<Eigen::ThreadPoolDevice, T>::Forward(
        HostContext(), Data<T>(dirs), n, static_cast<int>(degree), Data<T>(values)));
  });
}

ffi::Error Backward(ffi::AnyBuffer grad, ffi::AnyBuffer dirs, RetBuffer grad_dirs, int64_t degree) {
  const int64_t n = Count(dirs);
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncodeGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(SHEncodeFunctor<Eigen::ThreadPoolDevice, T>::Backward(
        HostContext(), Data<T>(grad), Data<T>(dirs), n, static_cast<int>(degree), Data<T>(grad_dirs)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsSHEncode", "Host", Forward, xla_ffi::BindBuffers<1, 1>().Attr<int64_t>("degree"));
MO_XLA_FFI_HANDLER("MetalOpsSHEncodeGrad", "Host", Backward, xla_ffi::BindBuffers<2, 1>().Attr<int64_t>("degree"));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
