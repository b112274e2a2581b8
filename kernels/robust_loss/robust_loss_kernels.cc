// The CPU registrations of MetalOpsRobustLoss / MetalOpsRobustLossGrad: the
// kernel class kernels/robust_loss/robust_loss_kernel.h with the CPU functor of
// kernels/robust_loss/robust_loss_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/robust_loss/robust_loss_functor.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/robust_loss/robust_loss_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

MO_REGISTER_CPU_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, Eigen::half);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, ::tensorflow::bfloat16);

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/robust_loss/robust_loss_xla.cc emits.
namespace mo::xla_kernels {
namespace {

// The functor's arguments, the layout checked again (cheap) from the buffers.
template <typename T>
ffi::Error ArgsOf(const ffi::AnyBuffer& x, const ffi::AnyBuffer& alpha, const ffi::AnyBuffer& scale,
                  RobustLossArgs<T>* args) {
  ffi::Error shapes = xla_ffi::ToError(
      robust_loss::ParamShapes(xla_ffi::DimsOf(x), xla_ffi::DimsOf(alpha), xla_ffi::DimsOf(scale), &args->layout));
  if (shapes.failure()) return shapes;
  args->n = static_cast<int64_t>(x.element_count());
  args->x = Data<T>(x);
  args->alpha = Data<float>(alpha);
  args->scale = Data<float>(scale);
  return xla_ffi::ToError(RobustLossFunctor<Eigen::ThreadPoolDevice, T>::CheckParamValues(*args));
}

ffi::Error Forward(ffi::AnyBuffer x, ffi::AnyBuffer alpha, ffi::AnyBuffer scale, RetBuffer y) {
  return xla_ffi::ForType<float, Eigen::half, ::tensorflow::bfloat16>(x.element_type(), "RobustLoss", [&](auto type) {
    using T = decltype(type);
    RobustLossArgs<T> args;
    ffi::Error error = ArgsOf(x, alpha, scale, &args);
    if (error.failure() || args.n == 0) return error;
    return xla_ffi::ToError(RobustLossFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), args, Data<T>(y)));
  });
}

ffi::Error Backward(ffi::AnyBuffer grad, ffi::AnyBuffer x, ffi::AnyBuffer alpha, ffi::AnyBuffer scale,
                    RetBuffer dx, RetBuffer dalpha, RetBuffer dscale) {
  return xla_ffi::ForType<float, Eigen::half, ::tensorflow::bfloat16>(x.element_type(), "RobustLossGrad", [&](auto type) {
    using T = decltype(type);
    RobustLossArgs<T> args;
    ffi::Error error = ArgsOf(x, alpha, scale, &args);
    if (error.failure()) return error;
    return xla_ffi::ToError(RobustLossFunctor<Eigen::ThreadPoolDevice, T>::Backward(
        HostContext(), args, Data<T>(grad), Data<T>(dx), Data<float>(dalpha), Data<float>(dscale)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsRobustLoss", "Host", Forward, xla_ffi::BindBuffers<3, 1>());
MO_XLA_FFI_HANDLER("MetalOpsRobustLossGrad", "Host", Backward, xla_ffi::BindBuffers<4, 3>());

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
