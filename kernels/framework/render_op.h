// What the two volume renderers' TensorFlow code shares (samples [R, S] and
// packed samples [N]): the REGISTER_OP chains' outputs and the backward's
// inputs after the forward's; the shape functions, over those outputs and the
// attributes both chains write (tests/test_op_signatures.py checks they agree;
// each op supplies only how its inputs give R and the shape of its per-sample
// values); and the kernel classes' output allocation.
#ifndef MO_KERNELS_FRAMEWORK_RENDER_OP_H_
#define MO_KERNELS_FRAMEWORK_RENDER_OP_H_

#include <array>
#include <cstdint>

#include "kernels/common/render_args.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

// The REGISTER_OP chain parts both renderers' ops write after their own
// inputs: the forward's outputs, and the backward's inputs that carry the
// forward's outputs and their gradients, with its outputs.
#define MO_RENDER_OUTPUTS      \
  .Output("out_rgb: T")        \
      .Output("depth: T")      \
      .Output("opacity: T")    \
      .Output("weights: T")    \
      .Attr("T: {float, double}")
#define MO_RENDER_GRAD_INPUTS_AND_OUTPUTS \
  .Input("out_rgb: T")                    \
      .Input("depth: T")                  \
      .Input("opacity: T")                \
      .Input("weights: T")                \
      .Input("grad_rgb: T")               \
      .Input("grad_depth: T")             \
      .Input("grad_opacity: T")           \
      .Input("grad_weights: T")           \
      .Output("grad_sigma: T")            \
      .Output("grad_samples_rgb: T")      \
      .Output("grad_background: T")       \
      .Attr("T: {float, double}")

namespace mo {
namespace render_op {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// What a renderer's inputs give its shape functions: R, the shape of the
// per-sample values ([R, S] or [N]: sigma, the weights when returned) and of
// the weights when not returned ([R, 0] or [0]).
struct Shapes {
  DimensionHandle rays;
  ShapeHandle samples, no_weights;
};

// The op's check of its forward inputs (the backward's first ones).
using InputsFn = absl::Status (*)(InferenceContext* c, Shapes* shapes);

// background, input `index`: [3] or [R, 3], R merged into *rays.
inline absl::Status BackgroundShape(InferenceContext* c, int index, DimensionHandle* rays) {
  ShapeHandle background;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(index), 1, &background));
  TF_RETURN_IF_ERROR(c->WithRankAtMost(background, 2, &background));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(background, -1), 3, &unused));
  if (c->Rank(background) == 2) TF_RETURN_IF_ERROR(c->Merge(*rays, c->Dim(background, 0), rays));
  return absl::OkStatus();
}

// The forward's shape function: out_rgb [R, 3], depth [R], opacity [R], and
// weights shaped like the samples when return_weights (the op's Attrs).
template <typename Attrs, InputsFn inputs>
absl::Status ForwardShapeFn(InferenceContext* c) {
  Attrs attrs;
  TF_RETURN_IF_ERROR(checks::ReadAttrsOf(c, &attrs));
  Shapes s;
  TF_RETURN_IF_ERROR(inputs(c, &s));
  c->set_output(0, c->MakeShape({s.rays, 3}));
  c->set_output(1, c->Vector(s.rays));
  c->set_output(2, c->Vector(s.rays));
  c->set_output(3, attrs.return_weights ? s.samples : s.no_weights);
  return absl::OkStatus();
}

// The backward's shape function: its inputs from `first` on by rank (the
// weights and their gradient of the samples' rank), grad_sigma shaped like the
// samples, grad_samples_rgb like the samples by 3, grad_background [R, 3];
// the attributes (the op's GradAttrs) checked.
template <typename GradAttrs, InputsFn inputs, int first>
absl::Status BackwardShapeFn(InferenceContext* c) {
  GradAttrs attrs;
  TF_RETURN_IF_ERROR(checks::ReadAttrsOf(c, &attrs));
  Shapes s;
  TF_RETURN_IF_ERROR(inputs(c, &s));
  const int w = c->Rank(s.samples);
  std::array<ShapeHandle, 8> grad_inputs;
  TF_RETURN_IF_ERROR(checks::InputRanks(c, first, {2, 1, 1, w, 2, 1, 1, w}, &grad_inputs));
  ShapeHandle samples_rgb;
  TF_RETURN_IF_ERROR(c->Concatenate(s.samples, c->Vector(3), &samples_rgb));
  c->set_output(0, s.samples);
  c->set_output(1, samples_rgb);
  c->set_output(2, c->MakeShape({s.rays, 3}));
  return absl::OkStatus();
}

}  // namespace render_op

// Allocates the forward's outputs, out_rgb [R, 3], depth [R], opacity [R] and
// weights (`weights` when return_weights, else `no_weights`), into *out.
template <typename T>
absl::Status AllocateRenderOutputs(::tensorflow::OpKernelContext* ctx, int64_t R, bool return_weights,
                                   const ::tensorflow::TensorShape& weights,
                                   const ::tensorflow::TensorShape& no_weights, RenderOutputs<T>* out) {
  using ::tensorflow::TensorShape;
  T* weights_out = nullptr;
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 0, TensorShape({R, 3}), &out->out_rgb));
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 1, TensorShape({R}), &out->depth));
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 2, TensorShape({R}), &out->opacity));
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 3, return_weights ? weights : no_weights, &weights_out));
  out->weights = return_weights ? weights_out : nullptr;
  return absl::OkStatus();
}

// The backward's inputs from `first` on (out_rgb, depth, opacity, weights and
// their gradients; the weights only when has_weight_grad) and its outputs,
// grad_sigma and grad_samples_rgb shaped like sigma and rgb (inputs 0 and 1),
// grad_background [R, 3], allocated, into *grads.
template <typename T>
absl::Status AllocateRenderGrads(::tensorflow::OpKernelContext* ctx, int first, int64_t R, bool has_weight_grad,
                                 RenderGrads<T>* grads) {
  T *grad_sigma = nullptr, *grad_samples_rgb = nullptr, *grad_background = nullptr;
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 0, ctx->input(0).shape(), &grad_sigma));
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 1, ctx->input(1).shape(), &grad_samples_rgb));
  TF_RETURN_IF_ERROR(AllocateOutput(ctx, 2, ::tensorflow::TensorShape({R, 3}), &grad_background));
  auto in = [&](int i) { return ctx->input(first + i).flat<T>().data(); };
  *grads = {in(0), in(1), in(2), has_weight_grad ? in(3) : nullptr,
            in(4), in(5), in(6), has_weight_grad ? in(7) : nullptr,
            grad_sigma, grad_samples_rgb, grad_background};
  return absl::OkStatus();
}

}  // namespace mo

#endif  // MO_KERNELS_FRAMEWORK_RENDER_OP_H_
