// The XLA kernels of MetalOpsHashEncode / MetalOpsHashEncodeGrad /
// MetalOpsHashEncodeGradGrad (second derivatives; kernels/xla/xla_kernel.h),
// which emit the calls that their handlers take, with the op's attributes
// (FfiAttrsOf): the host handlers of hash_encode_cpu.cc (the CPU functor, the
// table gradient in a fixed order, the same bits as without XLA), the CUDA
// handlers of hash_encode_cuda.cc. MetalOpsHashGridOffsets (computed eagerly
// by the wrapper) has no XLA kernel.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/hash_encode/hash_encode.h"

namespace mo {
namespace xla_kernels {
namespace {

// The grid ops' XLA kernels: the check of inputs [N, D] and table [P, F]
// (inputs `inputs_at` and the next one), which sets D, F, P and the grid's
// Params in g, then compile(ctx, attrs, g, N), the op's own checks and its call.
template <typename A>
using GridCompileFn = void (*)(XlaOpKernelContext* ctx, const A& attrs, const hash_encode::TableGeometry& g,
                               int64_t n);

template <typename A, int inputs_at, GridCompileFn<A> compile>
void CompileGridOp(XlaOpKernelContext* ctx, const A& attrs) {
  const checks::Dims inputs = InputDims(ctx, inputs_at);
  const int64_t n = inputs.empty() ? 0 : inputs[0];
  hash_encode::TableGeometry g;
  OP_REQUIRES_OK(ctx, checks::ToStatus(
                          hash_encode::InputsAndTable(attrs, inputs, InputDims(ctx, inputs_at + 1), &g)));
  compile(ctx, attrs, g, n);
}

template <typename A, int inputs_at, GridCompileFn<A> compile>
using GridXlaOp = XlaOpWithAttrs<A, CompileGridOp<A, inputs_at, compile>>;

// The columns of encoded and grad_encoded, L * F.
template <typename A>
int64_t Width(const A& attrs, const hash_encode::TableGeometry& g) {
  return int64_t(attrs.num_levels) * g.features;
}

void CompileHashEncode(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs, const hash_encode::TableGeometry& g,
                       int64_t n) {
  EmitFfiCall(ctx, "MetalOpsHashEncode", InputsUpTo(ctx, 2), {ArrayShape(ElementType(ctx, 1), {n, Width(attrs, g)})},
              FfiAttrsOf(attrs));
}

void CompileHashEncodeGrad(XlaOpKernelContext* ctx, const hash_encode::GradAttrs& attrs,
                           const hash_encode::TableGeometry& g, int64_t n) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(hash_encode::Matrix("grad_encoded", InputDims(ctx, 0), n, Width(attrs, g))));
  EmitFfiCall(ctx, "MetalOpsHashEncodeGrad", InputsUpTo(ctx, 3),
              {ArrayShape(ElementType(ctx, 2), {attrs.compute_table_grad ? g.rows : 0, g.features}),
               ArrayShape(::xla::F32, {attrs.compute_input_grad ? n : 0, g.dims})},
              FfiAttrsOf(attrs));
}

void CompileHashEncodeGradGrad(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs,
                               const hash_encode::TableGeometry& g, int64_t n) {
  const checks::Dims grad_encoded = InputDims(ctx, 1);
  OP_REQUIRES_OK(ctx, checks::ToStatus(hash_encode::Matrix("grad_encoded", grad_encoded, n, Width(attrs, g))));
  OP_REQUIRES_OK(ctx, checks::ToStatus(hash_encode::Matrix("grad_grad_inputs", InputDims(ctx, 0), n, g.dims)));
  EmitFfiCall(ctx, "MetalOpsHashEncodeGradGrad", InputsUpTo(ctx, 4),
              {ShapeLike(ctx, 3), ArrayShape(ElementType(ctx, 3), grad_encoded)}, FfiAttrsOf(attrs));
}

using HashEncodeXlaOp = GridXlaOp<hash_encode::Attrs, 0, CompileHashEncode>;
using HashEncodeGradXlaOp = GridXlaOp<hash_encode::GradAttrs, 1, CompileHashEncodeGrad>;
using HashEncodeGradGradXlaOp = GridXlaOp<hash_encode::Attrs, 2, CompileHashEncodeGradGrad>;
MO_REGISTER_XLA_OP(Name("MetalOpsHashEncode").TypeConstraint("T", kFloatTypes), HashEncodeXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsHashEncodeGrad").TypeConstraint("T", kFloatTypes), HashEncodeGradXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsHashEncodeGradGrad").TypeConstraint("T", kFloatTypes), HashEncodeGradGradXlaOp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
