// The XLA kernel of ZeroOut (kernels/xla/xla_kernel.h), which emits the call
// that its handlers take, with the op's attribute (FfiAttrsOf): the host
// handler of zero_out_cpu.cc, the CUDA handler of zero_out_cuda.cc.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/zero_out/zero_out.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileZeroOut(XlaOpKernelContext* ctx, const zero_out::Attrs& attrs) {
  const int64_t n = ctx->InputShape(0).num_elements();
  OP_REQUIRES_OK(ctx, checks::ToStatus(zero_out::PreserveIndex(attrs.preserve_index, n)));
  EmitFfiCall(ctx, "ZeroOut", {ctx->Input(0)}, {ShapeLike(ctx, 0)}, FfiAttrsOf(attrs));
}

constexpr ::tensorflow::DataType kZeroOutTypes[] = {::tensorflow::DT_INT32, ::tensorflow::DT_INT64,
                                                    ::tensorflow::DT_FLOAT, ::tensorflow::DT_DOUBLE};
MO_REGISTER_XLA_OP(Name("ZeroOut").TypeConstraint("T", kZeroOutTypes), XlaOpWithAttrs<zero_out::Attrs, CompileZeroOut>);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
