// The XLA kernels of MetalOpsTruncExp / MetalOpsTruncExpGrad
// (kernels/xla/xla_kernel.h) and their host handler: the CPU functor of
// kernels/cpu/trunc_exp_cpu.h.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>

#include "kernels/cpu/trunc_exp_cpu.h"
#include "kernels/spec/trunc_exp_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

class TruncExpXlaOp : public XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;
  void Compile(XlaOpKernelContext* ctx) override {
    EmitFfiCall(ctx, "MetalOpsTruncExp", {ctx->Input(0)}, {ShapeLike(ctx, 0)});
  }
};

class TruncExpGradXlaOp : public XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;
  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, checks::ToStatus(trunc_exp::GradShape(InputDims(ctx, 0), InputDims(ctx, 1))));
    EmitFfiCall(ctx, "MetalOpsTruncExpGrad", InputsUpTo(ctx, 2), {ShapeLike(ctx, 1)});
  }
};

MO_REGISTER_XLA_OP(Name("MetalOpsTruncExp").TypeConstraint("T", kFloatTypes), TruncExpXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsTruncExpGrad").TypeConstraint("T", kFloatTypes), TruncExpGradXlaOp);

namespace ffi = ::xla::ffi;
using xla_ffi::Data;

ffi::Error Forward(ffi::AnyBuffer x, xla_ffi::RetBuffer y) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExp", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(
        TruncExpFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), Data<T>(x), n, Data<T>(y)));
  });
}

ffi::Error Backward(ffi::AnyBuffer dy, ffi::AnyBuffer x, xla_ffi::RetBuffer dx) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExpGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(TruncExpFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), Data<T>(dy),
                                                                                   Data<T>(x), n, Data<T>(dx)));
  });
}

XLA_FFI_DEFINE_HANDLER(kForward, Forward, (xla_ffi::BindBuffers<1, 1>()));
XLA_FFI_DEFINE_HANDLER(kBackward, Backward, (xla_ffi::BindBuffers<2, 1>()));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsTruncExp", "Host", kForward);
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsTruncExpGrad", "Host", kBackward);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
