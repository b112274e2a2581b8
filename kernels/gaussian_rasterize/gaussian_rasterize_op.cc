// 3D Gaussian splatting's rasterization (front-to-back alpha compositing of
// depth-sorted 2D Gaussians per tile) and its gradient: op definitions, their
// attributes from the op's declaration (kernels/gaussian_rasterize/gaussian_rasterize.h
// MO_GAUSSIAN_RASTERIZE_ATTRS), their shape functions over its checks. Wrapper +
// gradient: python/metal_ops/gaussian_rasterize.py. Doc: docs/GAUSSIAN_RASTERIZE.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <vector>

#include "kernels/gaussian_rasterize/gaussian_rasterize.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace gaussian_rasterize_shapes {

namespace gr = ::mo::gaussian_rasterize;
using ::tensorflow::shape_inference::InferenceContext;

// Input i's dims (-1 unknown); an unknown rank reads as what the check wants
// (nothing to check).
mo::checks::Dims DimsOrAny(InferenceContext* c, int i, size_t rank) {
  mo::checks::Dims dims;
  if (!mo::checks::KnownDims(c, i, &dims)) dims.assign(rank, -1);
  return dims;
}

gr::InputDims InputDimsOf(InferenceContext* c) {
  return {DimsOrAny(c, 0, 2), DimsOrAny(c, 1, 2), DimsOrAny(c, 2, 2), DimsOrAny(c, 3, 1),
          DimsOrAny(c, 4, 1), DimsOrAny(c, 5, 1), DimsOrAny(c, 6, 2)};
}

::tensorflow::shape_inference::ShapeHandle Shape(InferenceContext* c, const mo::checks::Dims& dims) {
  std::vector<::tensorflow::shape_inference::DimensionHandle> handles;
  for (int64_t d : dims) handles.push_back(d < 0 ? c->UnknownDim() : c->MakeDim(d));
  return c->MakeShape(handles);
}

absl::Status ForwardShape(InferenceContext* c) {
  gr::Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  mo::checks::Dims image, pixels;
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(gr::Shapes(a, InputDimsOf(c), &image, &pixels)));
  c->set_output(0, Shape(c, image));
  c->set_output(1, Shape(c, pixels));
  c->set_output(2, Shape(c, pixels));
  return absl::OkStatus();
}

absl::Status GradShape(InferenceContext* c) {
  gr::Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(gr::GradShapes(a, InputDimsOf(c), DimsOrAny(c, 7, 2), DimsOrAny(c, 8, 2),
                                                         DimsOrAny(c, 9, 3), DimsOrAny(c, 10, 2))));
  for (int i = 0; i < 5; ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

}  // namespace gaussian_rasterize_shapes

// The inputs of both ops, in the order of gaussian_rasterize::InputDims.
#define MO_GAUSSIAN_RASTERIZE_INPUTS                                                                  \
  .Input("means2d: float").Input("conics: float").Input("colors: float").Input("opacities: float") \
      .Input("background: float").Input("gaussian_ids: int32").Input("tile_ranges: int32")

REGISTER_OP("MetalOpsGaussianRasterize")
    MO_GAUSSIAN_RASTERIZE_INPUTS
    .Output("image: float")
    .Output("alpha: float")
    .Output("last_ids: int32")
    MO_OP_ATTRS(MO_GAUSSIAN_RASTERIZE_ATTRS)
    .SetShapeFn(gaussian_rasterize_shapes::ForwardShape)
    .Doc(R"doc(
Front-to-back alpha compositing of depth-sorted 2D Gaussians per image tile
(3D Gaussian splatting's rasterization; gsplat's classic mode).

means2d: [N, 2] centres in pixels (u right, v down; pixel (i, j) centred at (j + 0.5, i + 0.5)).
conics: [N, 3] inverse 2D covariances (a, b, c) = (inv[0,0], inv[0,1], inv[1,1]).
colors: [N, C].
opacities: [N].
background: [C].
gaussian_ids: [M] the Gaussians of each tile, front to back, tile after tile.
tile_ranges: [tiles_y * tiles_x, 2] each tile's [start, end) into gaussian_ids.
image: [height, width, C].
alpha: [height, width] 1 - the final transmittance.
last_ids: [height, width] one past the index into gaussian_ids of the last Gaussian composited.
)doc");

REGISTER_OP("MetalOpsGaussianRasterizeGrad")
    MO_GAUSSIAN_RASTERIZE_INPUTS
    .Input("alpha: float")
    .Input("last_ids: int32")
    .Input("grad_image: float")
    .Input("grad_alpha: float")
    .Output("grad_means2d: float")
    .Output("grad_conics: float")
    .Output("grad_colors: float")
    .Output("grad_opacities: float")
    .Output("grad_background: float")
    MO_OP_ATTRS(MO_GAUSSIAN_RASTERIZE_ATTRS)
    .SetShapeFn(gaussian_rasterize_shapes::GradShape)
    .Doc(R"doc(
Backward of MetalOpsGaussianRasterize: each pixel's Gaussians in reverse order
from last_ids, the gradients summed per Gaussian.
)doc");
