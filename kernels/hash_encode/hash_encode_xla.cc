// The XLA kernels of MetalOpsHashEncode / MetalOpsHashEncodeGrad /
// MetalOpsHashEncodeGradGrad (second derivatives; kernels/xla/xla_kernel.h)
// emit the calls that their host handlers take: the CPU functor of
// kernels/hash_encode/hash_encode_functor.h (the table gradient in a fixed order, the
// same bits as without XLA), registered in kernels/hash_encode/hash_encode_kernels.cc.
// The grid's attributes travel as FFI attributes
// (the string ones as the spec's codes); the handler rebuilds the grid with
// the spec's Grid(). The CUDA handlers of all three:
// kernels/hash_encode/hash_encode_xla_gpu.cc. MetalOpsHashGridOffsets (computed
// eagerly by the wrapper) has no XLA kernel.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/hash_encode/hash_encode_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

using hash_encode::GridOp;

// The grid's attributes (a handler takes exactly the attributes it binds).
FfiAttrs GridAttrsOf(const hash_encode::GridAttrs& g) {
  return FfiAttrs()
      .Int("num_levels", g.num_levels)
      .Int("log2_hashmap_size", g.log2_hashmap_size)
      .Int("base_resolution", g.base_resolution)
      .Float("per_level_scale", g.per_level_scale)
      .Int("interpolation", g.interpolation)
      .Int("out_of_range", g.out_of_range);
}

// The grid ops' XLA kernels: the spec's check of inputs [N, D] and table
// [P, F] (inputs `inputs_at` and the next one), which sets D, F, P and the
// grid's Params in g, then compile(ctx, attrs, g, N), the op's own checks and
// its call.
using GridCompileFn = void (*)(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs,
                               const hash_encode::TableGeometry& g, int64_t n);

template <int inputs_at, GridCompileFn compile>
void CompileGridOp(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs) {
  const checks::Dims inputs = InputDims(ctx, inputs_at);
  const int64_t n = inputs.empty() ? 0 : inputs[0];
  hash_encode::TableGeometry g;
  OP_REQUIRES_OK(ctx, checks::ToStatus(
                          hash_encode::InputsAndTable(attrs.grid, inputs, InputDims(ctx, inputs_at + 1), &g)));
  compile(ctx, attrs, g, n);
}

template <GridOp op, int inputs_at, GridCompileFn compile>
using GridXlaOp = XlaOpWithAttrs<hash_encode::Attrs, CompileGridOp<inputs_at, compile>, op>;

// The columns of encoded and grad_encoded, L * F.
int64_t Width(const hash_encode::Attrs& attrs, const hash_encode::TableGeometry& g) {
  return int64_t(attrs.grid.num_levels) * g.features;
}

void CompileHashEncode(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs, const hash_encode::TableGeometry& g,
                       int64_t n) {
  EmitFfiCall(ctx, "MetalOpsHashEncode", InputsUpTo(ctx, 2), {ArrayShape(ElementType(ctx, 1), {n, Width(attrs, g)})},
              GridAttrsOf(attrs.grid));
}

void CompileHashEncodeGrad(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs,
                           const hash_encode::TableGeometry& g, int64_t n) {
  OP_REQUIRES_OK(ctx, checks::ToStatus(hash_encode::Matrix("grad_encoded", InputDims(ctx, 0), n, Width(attrs, g))));
  EmitFfiCall(ctx, "MetalOpsHashEncodeGrad", InputsUpTo(ctx, 3),
              {ArrayShape(ElementType(ctx, 2), {attrs.table_grad ? g.rows : 0, g.features}),
               ArrayShape(::xla::F32, {attrs.input_grad ? n : 0, g.dims})},
              GridAttrsOf(attrs.grid)
                  .Int("table_grad", attrs.table_grad)
                  .Int("input_grad", attrs.input_grad)
                  .Int("deterministic", attrs.deterministic));
}

void CompileHashEncodeGradGrad(XlaOpKernelContext* ctx, const hash_encode::Attrs& attrs,
                               const hash_encode::TableGeometry& g, int64_t n) {
  const checks::Dims grad_encoded = InputDims(ctx, 1);
  OP_REQUIRES_OK(ctx, checks::ToStatus(hash_encode::Matrix("grad_encoded", grad_encoded, n, Width(attrs, g))));
  OP_REQUIRES_OK(ctx, checks::ToStatus(hash_encode::Matrix("grad_grad_inputs", InputDims(ctx, 0), n, g.dims)));
  EmitFfiCall(ctx, "MetalOpsHashEncodeGradGrad", InputsUpTo(ctx, 4),
              {ShapeLike(ctx, 3), ArrayShape(ElementType(ctx, 3), grad_encoded)}, GridAttrsOf(attrs.grid));
}

using HashEncodeXlaOp = GridXlaOp<GridOp::kEncode, 0, CompileHashEncode>;
using HashEncodeGradXlaOp = GridXlaOp<GridOp::kEncodeGrad, 1, CompileHashEncodeGrad>;
using HashEncodeGradGradXlaOp = GridXlaOp<GridOp::kEncodeGradGrad, 2, CompileHashEncodeGradGrad>;
MO_REGISTER_XLA_OP(Name("MetalOpsHashEncode").TypeConstraint("T", kFloatTypes), HashEncodeXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsHashEncodeGrad").TypeConstraint("T", kFloatTypes), HashEncodeGradXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsHashEncodeGradGrad").TypeConstraint("T", kFloatTypes), HashEncodeGradGradXlaOp);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
