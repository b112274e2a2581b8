// The binning of projected Gaussians into image tiles, sorted by depth
// (Gaussian splatting): the op definition, its attributes from the op's
// declaration (kernels/gaussian_tile_bin/gaussian_tile_bin.h
// MO_GAUSSIAN_TILE_BIN_ATTRS) and its shape function over its checks.
// Wrapper: python/metal_ops/gaussian_tile_bin.py. Doc: docs/GAUSSIAN_TILE_BIN.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::InferenceContext;

absl::Status TileBinShape(InferenceContext* c) {
  mo::gaussian_tile_bin::Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::gaussian_tile_bin::Shapes(
      mo::checks::KnownDimsOr(c, 0, 2), mo::checks::KnownDimsOr(c, 1, 2), mo::checks::KnownDimsOr(c, 2, 1))));
  c->set_output(0, c->Vector(c->UnknownDim()));
  c->set_output(1, c->Matrix(mo::gaussian_tile_bin::Tiles(a), 2));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("MetalOpsGaussianTileBin")
    .Input("means2d: float")
    .Input("radii: int32")
    .Input("depths: float")
    .Output("gaussian_ids: int32")
    .Output("tile_ranges: int32")
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
