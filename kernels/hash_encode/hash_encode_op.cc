// Multiresolution hash encoding (instant-NGP): the op definitions, their
// attributes from the declarations of kernels/hash_encode/hash_encode.h, and
// their shape functions. Python: python/metal_ops/hash_encode.py. Semantics:
// docs/HASH_ENCODE.md.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/hash_encode/hash_encode.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// What a shape function knows of the grid: inputs [N, D], table [P, F] and the
// encoding's width num_levels * F.
struct Grid {
  ShapeHandle inputs, table;
  DimensionHandle width;
};

// The op's attributes (A) read and checked into *a; inputs [N, D] (D in 1..4,
// input `inputs_index`) and table [P, F] (F in 1, 2, 4, 8, the next input)
// where known, the row count P checked against hash_grid_size when D and P
// are known; the width, into *grid.
template <typename A>
Status ReadGrid(InferenceContext* c, int inputs_index, A* a, Grid* grid) {
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, a));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(inputs_index), 2, &grid->inputs));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(inputs_index + 1), 2, &grid->table));
  const DimensionHandle dims = c->Dim(grid->inputs, 1);
  const DimensionHandle features = c->Dim(grid->table, 1);
  const DimensionHandle rows = c->Dim(grid->table, 0);
  if (c->ValueKnown(dims)) {
    const DimensionHandle n = c->Dim(grid->inputs, 0);
    const mo::checks::Dims shape = {c->ValueKnown(n) ? c->Value(n) : -1, c->Value(dims)};
    TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::hash_encode::InputDim(c->Value(dims), shape)));
  }
  if (c->ValueKnown(features)) TF_RETURN_IF_ERROR(mo::checks::ToStatus(mo::hash_encode::Features(c->Value(features))));
  if (c->ValueKnown(dims) && c->ValueKnown(rows)) {
    mo::int64 expected = 0;
    TF_RETURN_IF_ERROR(
        mo::checks::ToStatus(mo::hash_encode::TableRows(*a, c->Value(dims), c->Value(rows), &expected)));
  }
  return c->Multiply(features, a->num_levels, &grid->width);
}

// grad_encoded, input `grad_index`: [N, num_levels * F].
Status CheckGradEncoded(InferenceContext* c, int grad_index, const Grid& grid) {
  ShapeHandle grad;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(grad_index), 2, &grad));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(grad, 0), c->Dim(grid.inputs, 0), &unused));
  return c->Merge(c->Dim(grad, 1), grid.width, &unused);
}

Status HashEncodeShape(InferenceContext* c) {
  mo::hash_encode::Attrs a;
  Grid grid;
  TF_RETURN_IF_ERROR(ReadGrid(c, 0, &a, &grid));
  c->set_output(0, c->Matrix(c->Dim(grid.inputs, 0), grid.width));
  return Status();
}

Status HashEncodeGradShape(InferenceContext* c) {
  mo::hash_encode::GradAttrs a;
  Grid grid;
  TF_RETURN_IF_ERROR(ReadGrid(c, 1, &a, &grid));
  TF_RETURN_IF_ERROR(CheckGradEncoded(c, 0, grid));
  c->set_output(0, a.compute_table_grad ? grid.table : c->Matrix(0, c->Dim(grid.table, 1)));
  c->set_output(1, a.compute_input_grad ? grid.inputs : c->Matrix(0, c->Dim(grid.inputs, 1)));
  return Status();
}

Status HashEncodeGradGradShape(InferenceContext* c) {
  mo::hash_encode::Attrs a;
  Grid grid;
  TF_RETURN_IF_ERROR(ReadGrid(c, 2, &a, &grid));
  ShapeHandle ggx;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &ggx));
  TF_RETURN_IF_ERROR(c->Merge(ggx, grid.inputs, &ggx));
  TF_RETURN_IF_ERROR(CheckGradEncoded(c, 1, grid));
  c->set_output(0, grid.table);
  c->set_output(1, c->Matrix(c->Dim(grid.inputs, 0), grid.width));
  return Status();
}

Status HashGridOffsetsShape(InferenceContext* c) {
  mo::hash_encode::OffsetsAttrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  c->set_output(0, c->Vector(a.num_levels + 1));
  return Status();
}

}  // namespace

REGISTER_OP("MetalOpsHashEncode")
    .Input("inputs: float")
    .Input("table: T")
    .Output("encoded: T")
    .Attr("T: {float, half}")
    MO_OP_ATTRS(MO_HASH_ENCODE_ATTRS)
    .SetShapeFn(HashEncodeShape)
    .Doc(R"doc(
Multiresolution hash encoding (instant-NGP, tiny-cuda-nn's "Hash" grid).

inputs: [N, D] float32 coordinates, D in 1..4, nominally in [0, 1].
table: [P, F] features, F in {1, 2, 4, 8}; P = hash_grid_size(D, ...).
encoded: [N, num_levels * F]; level l's features at columns l*F .. l*F+F-1.
num_levels: 1..32.
log2_hashmap_size: 1..30; a level has at most 2^log2_hashmap_size rows.
base_resolution: vertices per axis of level 0 (>= 1).
per_level_scale: resolution growth per level (>= 1).
interpolation: 'linear' or 'smoothstep'.
out_of_range: 'clamp' (clamp to [0,1]), 'wrap' (tiny-cuda-nn: no clamp), 'zero'
  (zero features and gradients outside [0,1]^D). NaN/inf rows encode to zero.
)doc");

REGISTER_OP("MetalOpsHashEncodeGrad")
    .Input("grad_encoded: T")
    .Input("inputs: float")
    .Input("table: T")
    .Output("grad_table: T")
    .Output("grad_inputs: float")
    .Attr("T: {float, half}")
    MO_OP_ATTRS(MO_HASH_ENCODE_GRAD_ATTRS)
    .SetShapeFn(HashEncodeGradShape)
    .Doc(R"doc(
Backward of MetalOpsHashEncode.

deterministic: a bitwise-reproducible table gradient on every device. CUDA
  also honours tf.config.experimental.enable_op_determinism(); the C-API Metal
  kernel cannot query it and honours this attribute or TF_DETERMINISTIC_OPS=1;
  the CPU kernel is deterministic either way.

grad_table: [P, F] (accumulated in float32, cast to T), or [0, F] when
  compute_table_grad is false.
grad_inputs: [N, D] float32, or [0, D] when compute_input_grad is false.
)doc");

REGISTER_OP("MetalOpsHashEncodeGradGrad")
    .Input("grad_grad_inputs: float")
    .Input("grad_encoded: T")
    .Input("inputs: float")
    .Input("table: T")
    .Output("grad_table: T")
    .Output("grad_grad_encoded: T")
    .Attr("T: {float, half}")
    MO_OP_ATTRS(MO_HASH_ENCODE_ATTRS)
    .SetShapeFn(HashEncodeGradGradShape)
    .Doc(R"doc(
Backward of MetalOpsHashEncodeGrad's grad_inputs output (second derivative,
for eikonal / SDF losses): given G = dLoss/d(grad_inputs) [N, D], returns
dLoss/d(table) [P, F] and dLoss/d(grad_encoded) [N, num_levels * F]. The
second derivative with respect to the inputs is not computed.
)doc");

REGISTER_OP("MetalOpsHashGridOffsets")
    .Output("offsets: int64")
    MO_OP_ATTRS(MO_HASH_GRID_OFFSETS_ATTRS)
    .SetShapeFn(HashGridOffsetsShape)
    .Doc(R"doc(
Row offsets of every level of a hash grid: offsets[0] = 0, offsets[l + 1] =
offsets[l] + rows of level l; offsets[num_levels] is the table's row count.
)doc");
