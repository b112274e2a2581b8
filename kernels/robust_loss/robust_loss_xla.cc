// The XLA kernels of MetalOpsRobustLoss / MetalOpsRobustLossGrad
// (kernels/xla/xla_kernel.h) and their host handler: the CPU functor of
// kernels/robust_loss/robust_loss_functor.h. The shape checks run while XLA compiles,
// the checks of alpha's and scale's values in the handler (as in the CPU
// kernel). CUDA handler: kernels/robust_loss/robust_loss_xla_gpu.cc.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/robust_loss/robust_loss_functor.h"
#include "kernels/robust_loss/robust_loss_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

// Inputs x, alpha, scale from `first` on.
absl::Status CheckParams(XlaOpKernelContext* ctx, int first) {
  robust_loss::ParamLayout layout;
  return checks::ToStatus(robust_loss::ParamShapes(InputDims(ctx, first), InputDims(ctx, first + 1),
                                                   InputDims(ctx, first + 2), &layout));
}

void CompileRobustLoss(XlaOpKernelContext* ctx) {
  OP_REQUIRES_OK(ctx, CheckParams(ctx, 0));
  EmitFfiCall(ctx, "MetalOpsRobustLoss", InputsUpTo(ctx, 3), {ShapeLike(ctx, 0)});
}

void CompileRobustLossGrad(XlaOpKernelContext* ctx) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss::GradShape(InputDims(ctx, 0), InputDims(ctx, 1))));
  OP_REQUIRES_OK(ctx, CheckParams(ctx, 1));
  EmitFfiCall(ctx, "MetalOpsRobustLossGrad", InputsUpTo(ctx, 4),
              {ShapeLike(ctx, 1), ArrayShape(::xla::F32, InputDims(ctx, 2)),
               ArrayShape(::xla::F32, InputDims(ctx, 3))});
}

MO_REGISTER_XLA_OP(Name("MetalOpsRobustLoss").TypeConstraint("T", kFloatAndBfloat16Types),
                   XlaOp<CompileRobustLoss>);
MO_REGISTER_XLA_OP(Name("MetalOpsRobustLossGrad").TypeConstraint("T", kFloatAndBfloat16Types),
                   XlaOp<CompileRobustLossGrad>);

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
}  // namespace xla_kernels
}  // namespace mo
