// The XLA kernels of the two volume renderers
// (kernels/<op>/<op>_xla.cc): one forward and one backward kernel over the
// attributes, outputs and backward inputs the two ops share, as their shape
// functions share them (kernels/framework/render_op.h). Each op supplies its
// number of inputs (the backward's first ones), its check of them, which sets
// R and S (RayShapes), the shape of its per-sample values and its spec's
// check of the backward's other inputs; the call carries the op's attributes
// (FfiAttrsOf: its Attrs or GradAttrs).
#ifndef MO_KERNELS_XLA_RENDER_XLA_KERNEL_H_
#define MO_KERNELS_XLA_RENDER_XLA_KERNEL_H_

#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/common/volume_render_math.h"

namespace mo {
namespace xla_kernels {

// The renderers' element types.
inline constexpr ::tensorflow::DataType kRenderTypes[] = {::tensorflow::DT_FLOAT, ::tensorflow::DT_DOUBLE};

// The op's check of its forward inputs (`op` names it in the messages).
using RayShapesFn = absl::Status (*)(XlaOpKernelContext* ctx, const char* op, render::RayShapes* shapes);
// The shape of `samples` per-sample values over `rays` rays: [R, S] or [N].
using SamplesDimsFn = checks::Dims (*)(int64_t rays, int64_t samples);
// The op's check of the backward's other inputs (its GradInputShapes).
using GradInputsFn = checks::Result (*)(const char* op, const render::RayShapes& shapes,
                                        const checks::Dims& out_rgb, const checks::Dims& depth,
                                        const checks::Dims& opacity, const checks::Dims& weights,
                                        const checks::Dims& grad_rgb, const checks::Dims& grad_depth,
                                        const checks::Dims& grad_opacity, const checks::Dims& grad_weights,
                                        bool* has_weight_grad);

// The forward `op` on its kInputs inputs: out_rgb [R, 3], depth [R], opacity
// [R], and the weights shaped like the samples when return_weights (else
// empty).
template <typename Attrs, const char* op, int kInputs, RayShapesFn ray_shapes, SamplesDimsFn samples_dims>
void CompileRender(XlaOpKernelContext* ctx, const Attrs& attrs) {
  render::RayShapes s;
  OP_REQUIRES_OK(ctx, ray_shapes(ctx, op, &s));
  const ::xla::PrimitiveType type = ElementType(ctx, 0);
  EmitFfiCall(ctx, op, InputsUpTo(ctx, kInputs),
              {ArrayShape(type, {s.rays, 3}), ArrayShape(type, {s.rays}), ArrayShape(type, {s.rays}),
               ArrayShape(type, samples_dims(s.rays, attrs.return_weights ? s.samples : 0))},
              FfiAttrsOf(attrs));
}

// The backward `op`: the forward's kInputs inputs, then its outputs and their
// gradients (8); grad_sigma like sigma, grad_samples_rgb like rgb,
// grad_background [R, 3].
template <typename GradAttrs, const char* op, int kInputs, RayShapesFn ray_shapes, GradInputsFn grad_inputs>
void CompileRenderGrad(XlaOpKernelContext* ctx, const GradAttrs& attrs) {
  render::RayShapes s;
  OP_REQUIRES_OK(ctx, ray_shapes(ctx, op, &s));
  checks::Dims in[8];
  for (int i = 0; i < 8; ++i) in[i] = InputDims(ctx, kInputs + i);
  bool has_weight_grad = false;
  OP_REQUIRES_OK(ctx, checks::ToStatus(grad_inputs(op, s, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7],
                                                   &has_weight_grad)));
  const ::xla::PrimitiveType type = ElementType(ctx, 0);
  EmitFfiCall(ctx, op, InputsUpTo(ctx, kInputs + 8),
              {ArrayShape(type, InputDims(ctx, 0)), ArrayShape(type, InputDims(ctx, 1)), ArrayShape(type, {s.rays, 3})},
              FfiAttrsOf(attrs));
}

template <typename Attrs, const char* op, int kInputs, RayShapesFn ray_shapes, SamplesDimsFn samples_dims>
using RenderXlaOp = XlaOpWithAttrs<Attrs, CompileRender<Attrs, op, kInputs, ray_shapes, samples_dims>>;

template <typename GradAttrs, const char* op, int kInputs, RayShapesFn ray_shapes, GradInputsFn grad_inputs>
using RenderGradXlaOp = XlaOpWithAttrs<GradAttrs, CompileRenderGrad<GradAttrs, op, kInputs, ray_shapes, grad_inputs>>;

}  // namespace xla_kernels
}  // namespace mo

#endif  // MO_KERNELS_XLA_RENDER_XLA_KERNEL_H_
