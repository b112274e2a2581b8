// The XLA kernel of ZeroOut (kernels/xla/xla_kernel.h) and its host handler:
// the CPU functor of kernels/zero_out/zero_out_functor.h.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/zero_out/zero_out_functor.h"
#include "kernels/zero_out/zero_out_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileZeroOut(XlaOpKernelContext* ctx, const zero_out::Attrs& attrs) {
  const int64_t n = ctx->InputShape(0).num_elements();
  OP_REQUIRES_OK(ctx, checks::ToStatus(zero_out::PreserveIndex(attrs.preserve_index, n)));
  EmitFfiCall(ctx, "ZeroOut", {ctx->Input(0)}, {ShapeLike(ctx, 0)},
              FfiAttrs().Int("preserve_index", attrs.preserve_index));
}

constexpr ::tensorflow::DataType kTypes[] = {::tensorflow::DT_INT32, ::tensorflow::DT_INT64, ::tensorflow::DT_FLOAT,
                                             ::tensorflow::DT_DOUBLE};
using ZeroOutXlaOp = XlaOpWithAttrs<zero_out::Attrs, CompileZeroOut>;
MO_REGISTER_XLA_OP(Name("ZeroOut").TypeConstraint("T", kTypes), ZeroOutXlaOp);

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
}  // namespace xla_kernels
}  // namespace mo
