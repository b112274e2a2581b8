// The XLA kernels of MetalOpsTruncExp / MetalOpsTruncExpGrad
// (kernels/xla/xla_kernel.h) and their host handler: the CPU functor of
// kernels/trunc_exp/trunc_exp_functor.h.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/trunc_exp/trunc_exp_functor.h"
#include "kernels/trunc_exp/trunc_exp_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileTruncExp(XlaOpKernelContext* ctx) {
  EmitFfiCall(ctx, "MetalOpsTruncExp", {ctx->Input(0)}, {ShapeLike(ctx, 0)});
}

void CompileTruncExpGrad(XlaOpKernelContext* ctx) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(trunc_exp::GradShape(InputDims(ctx, 0), InputDims(ctx, 1))));
  EmitFfiCall(ctx, "MetalOpsTruncExpGrad", InputsUpTo(ctx, 2), {ShapeLike(ctx, 1)});
}

MO_REGISTER_XLA_OP(Name("MetalOpsTruncExp").TypeConstraint("T", kFloatTypes), XlaOp<CompileTruncExp>);
MO_REGISTER_XLA_OP(Name("MetalOpsTruncExpGrad").TypeConstraint("T", kFloatTypes), XlaOp<CompileTruncExpGrad>);

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
}  // namespace xla_kernels
}  // namespace mo
