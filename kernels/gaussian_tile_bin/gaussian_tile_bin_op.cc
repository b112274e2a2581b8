// The binning of projected Gaussians into image tiles, sorted by depth
// (Gaussian splatting), MetalOpsGaussianTileBin, and the same into outputs of
// a static size, MetalOpsGaussianTileBinStatic (XLA): the op definitions,
// their attributes from the ops' declaration
// (kernels/gaussian_tile_bin/gaussian_tile_bin.h MO_GAUSSIAN_TILE_BIN_ATTRS,
// MO_GAUSSIAN_TILE_BIN_STATIC_ATTRS) and their shape function over the checks.
// Wrapper: python/metal_ops/gaussian_tile_bin.py. Doc: docs/GAUSSIAN_TILE_BIN.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::InferenceContext;

// MetalOpsGaussianTileBin's shape function: gaussian_ids [M], tile_ranges [tiles, 2].
absl::Status TileBinShape(InferenceContext* c) {
  mo::gaussian_tile_bin::Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::gaussian_tile_bin::Shapes(
      mo::checks::KnownDimsOr(c, 0, 2), mo::checks::KnownDimsOr(c, 1, 2), mo::checks::KnownDimsOr(c, 2, 1))));
  c->set_output(0, c->Vector(c->UnknownDim()));
  c->set_output(1, c->Matrix(mo::gaussian_tile_bin::Tiles(a), 2));
  return absl::OkStatus();
}

// MetalOpsGaussianTileBinStatic's: gaussian_ids [max_intersections], and two scalars.
absl::Status TileBinStaticShape(InferenceContext* c) {
  mo::gaussian_tile_bin::StaticAttrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  TF_RETURN_IF_ERROR(TileBinShape(c));
  c->set_output(0, c->Vector(a.max_intersections));
  c->set_output(2, c->Scalar());
  c->set_output(3, c->Scalar());
  return absl::OkStatus();
}

}  // namespace

// The inputs and outputs of MetalOpsGaussianTileBin, MetalOpsGaussianTileBinStatic's first.
#define MO_GAUSSIAN_TILE_BIN_INPUTS_OUTPUTS \
  .Input("means2d: float")                  \
      .Input("radii: int32")                \
      .Input("depths: float")               \
      .Output("gaussian_ids: int32")        \
      .Output("tile_ranges: int32")

REGISTER_OP("MetalOpsGaussianTileBin")
    MO_GAUSSIAN_TILE_BIN_INPUTS_OUTPUTS
    MO_OP_ATTRS(MO_GAUSSIAN_TILE_BIN_ATTRS)
    .SetShapeFn(TileBinShape)
    .Doc(R"doc(
Bins projected Gaussians (MetalOpsGaussianProject's outputs) into the image's
tiles of tile_size x tile_size pixels: one entry per (tile, Gaussian)
intersection, sorted by tile id (ty * tiles_x + tx), then depth, then index.

means2d: [N, 2] pixel coordinates.
radii: [N, 2] int32 (x, y); 0 (culled) touches no tile.
depths: [N].
gaussian_ids: [M] int32, the Gaussian of each intersection.
tile_ranges: [ceil(height / tile_size) * ceil(width / tile_size), 2] int32,
  each tile's [start, end) in gaussian_ids.
)doc");

REGISTER_OP("MetalOpsGaussianTileBinStatic")
    MO_GAUSSIAN_TILE_BIN_INPUTS_OUTPUTS
    .Output("num_intersections: int32")
    .Output("num_gaussians: int32")
    MO_OP_ATTRS(MO_GAUSSIAN_TILE_BIN_ATTRS)
    MO_OP_ATTRS(MO_GAUSSIAN_TILE_BIN_STATIC_ATTRS)
    .SetShapeFn(TileBinStaticShape)
    .Doc(R"doc(
MetalOpsGaussianTileBin with outputs of a static size, B = max_intersections
(what XLA compiles). Gaussians are taken whole in index order while their
intersections fit in B; the Gaussians after the first one that does not fit
get none (every tile drops them alike).

Inputs and attributes: MetalOpsGaussianTileBin's.
gaussian_ids: [B] int32; entries [0, num_intersections) are
  MetalOpsGaussianTileBin's of the first num_gaussians Gaussians alone; the
  rest are -1.
tile_ranges: [tiles, 2] int32, each tile's [start, end) among the kept entries.
num_intersections: int32 scalar, the intersections kept.
num_gaussians: int32 scalar, the Gaussians kept (N where all fit).
)doc");
