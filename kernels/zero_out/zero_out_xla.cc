// The XLA kernel of ZeroOut (kernels/xla/xla_kernel.h), which emits the call that its host
// handler takes: the CPU functor of kernels/zero_out/zero_out_functor.h, registered in
// kernels/zero_out/zero_out_kernels.cc.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

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

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
