// The shape functions the two renderers share, VolumeRender
// (ops/volume_render_op.cc) and PackedVolumeRender
// (ops/packed_volume_render_op.cc), over the outputs and attributes their
// REGISTER_OP chains both write out (tests/test_op_signatures.py checks they
// agree). Each op supplies only how its inputs give R and the shape of its
// per-sample values.
#ifndef MO_KERNELS_VOLUME_RENDER_RENDER_OP_H_
#define MO_KERNELS_VOLUME_RENDER_RENDER_OP_H_

#include "kernels/spec/checks_tf.h"
#include "kernels/volume_render/volume_render_spec.h"
#include "tensorflow/core/framework/shape_inference.h"

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
// weights shaped like the samples when return_weights.
template <const char* op, InputsFn inputs>
absl::Status ForwardShapeFn(InferenceContext* c) {
  volume_render::Attrs attrs;
  TF_RETURN_IF_ERROR(checks::ReadAttrsOf(c, op, /*forward=*/true, &attrs));
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
// samples, grad_samples_rgb like the samples by 3, grad_background [R, 3].
template <const char* op, InputsFn inputs, int first>
absl::Status BackwardShapeFn(InferenceContext* c) {
  volume_render::Attrs attrs;
  TF_RETURN_IF_ERROR(checks::ReadAttrsOf(c, op, /*forward=*/false, &attrs));
  Shapes s;
  TF_RETURN_IF_ERROR(inputs(c, &s));
  const int w = c->Rank(s.samples);
  const int ranks[8] = {2, 1, 1, w, 2, 1, 1, w};
  ShapeHandle shape;
  for (int i = 0; i < 8; ++i) TF_RETURN_IF_ERROR(c->WithRank(c->input(first + i), ranks[i], &shape));
  ShapeHandle samples_rgb;
  TF_RETURN_IF_ERROR(c->Concatenate(s.samples, c->Vector(3), &samples_rgb));
  c->set_output(0, s.samples);
  c->set_output(1, samples_rgb);
  c->set_output(2, c->MakeShape({s.rays, 3}));
  return absl::OkStatus();
}

}  // namespace render_op
}  // namespace mo

#endif  // MO_KERNELS_VOLUME_RENDER_RENDER_OP_H_
