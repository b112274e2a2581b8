// MetalOpsRayMarch: packed samples of rays marched through an occupancy
// bitfield; MetalOpsRayMarchStatic: the same into outputs of a static size
// (XLA, docs/XLA.md): their op definitions, their attributes from the ops'
// declaration (kernels/ray_march/ray_march.h MO_RAY_MARCH_ATTRS,
// MO_RAY_MARCH_STATIC_ATTRS) and their shape functions. Formulas and checks:
// kernels/ray_march/ray_march.h. Python: python/metal_ops/ray_march.py.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <array>
#include <type_traits>

#include "kernels/ray_march/ray_march.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// The inputs' checks of both ops; the ray count into *rays.
absl::Status RayMarchInputShapes(InferenceContext* c, const mo::ray_march::Attrs& a, DimensionHandle* rays) {
  bool known = true;
  mo::checks::Dims dims[6];
  for (int i = 0; i < 6; ++i) {
    known = mo::checks::KnownDims(c, i, &dims[i]) && known;
    for (const int64_t d : dims[i]) known = known && d >= 0;
  }
  if (known) {
    // Every size is known: the kernels' own checks and messages.
    TF_RETURN_IF_ERROR(
        mo::checks::ToStatus(mo::ray_march::Shapes(dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], a)));
  }
  std::array<ShapeHandle, 6> in;
  TF_RETURN_IF_ERROR(mo::checks::InputRanks(c, 0, {2, 2, 1, 1, 2, 0}, &in));
  const auto& [origins, directions, near, far, occupancy, seed] = in;
  *rays = c->Dim(origins, 0);
  TF_RETURN_IF_ERROR(c->Merge(*rays, c->Dim(directions, 0), rays));
  TF_RETURN_IF_ERROR(c->Merge(*rays, c->Dim(near, 0), rays));
  TF_RETURN_IF_ERROR(c->Merge(*rays, c->Dim(far, 0), rays));
  return absl::OkStatus();
}

// Both ops' shape function: the attributes read and checked, the inputs'
// checks, outputs 0-4 (samples [samples], layout [R]); RayMarchStatic's two
// counts are scalars.
template <typename Attrs>
absl::Status RayMarchShapeOf(InferenceContext* c) {
  Attrs a;
  TF_RETURN_IF_ERROR(mo::checks::ReadAttrsOf(c, &a));
  DimensionHandle rays;
  TF_RETURN_IF_ERROR(RayMarchInputShapes(c, a, &rays));
  DimensionHandle samples = c->UnknownDim();
  if constexpr (std::is_same_v<Attrs, mo::ray_march::StaticAttrs>) samples = c->MakeDim(a.sample_budget);
  for (int i = 0; i < 3; ++i) c->set_output(i, c->Vector(samples));
  c->set_output(3, c->Vector(rays));
  c->set_output(4, c->Vector(rays));
  for (int i = 5; i < c->num_outputs(); ++i) c->set_output(i, c->Scalar());
  return absl::OkStatus();
}

}  // namespace

// The inputs and outputs of MetalOpsRayMarch, MetalOpsRayMarchStatic's first.
#define MO_RAY_MARCH_INPUTS_OUTPUTS    \
  .Input("origins: float")             \
      .Input("directions: float")      \
      .Input("near: float")            \
      .Input("far: float")             \
      .Input("occupancy: uint8")       \
      .Input("seed: int32")            \
      .Output("t_starts: float")       \
      .Output("t_ends: float")         \
      .Output("ray_indices: int32")    \
      .Output("ray_offsets: int32")    \
      .Output("ray_counts: int32")

REGISTER_OP("MetalOpsRayMarch")
    MO_RAY_MARCH_INPUTS_OUTPUTS
    MO_OP_ATTRS(MO_RAY_MARCH_ATTRS)
    .SetShapeFn(RayMarchShapeOf<mo::ray_march::Attrs>)
    .Doc(R"doc(
Marches rays through an occupancy bitfield and returns the samples in occupied
cells, packed and ordered by ray (kernels/ray_march/ray_march.h).

origins, directions: [R, 3]. near, far: [R], clipped to the outermost cascade.
occupancy: [C, ceil(G^3 / 8)] uint8; cascade c covers aabb scaled by 2^c about
  its centre; cell (x, y, z) is bit x + G (y + G z), least significant first.
seed: int32 scalar; with jitter, each ray's first step is offset by
  u * dt, u in [0, 1) a hash of (seed, ray).
t_starts, t_ends, ray_indices: [N], the samples of ray 0, then ray 1, ...
ray_offsets, ray_counts: [R]; ray r's samples are
  [ray_offsets[r], ray_offsets[r] + ray_counts[r]).
)doc");

REGISTER_OP("MetalOpsRayMarchStatic")
    MO_RAY_MARCH_INPUTS_OUTPUTS
    .Output("num_samples: int32")
    .Output("num_rays: int32")
    MO_OP_ATTRS(MO_RAY_MARCH_ATTRS)
    MO_OP_ATTRS(MO_RAY_MARCH_STATIC_ATTRS)
    .SetShapeFn(RayMarchShapeOf<mo::ray_march::StaticAttrs>)
    .Doc(R"doc(
MetalOpsRayMarch with outputs of a static size, S = sample_budget (what XLA
compiles). Rays are taken in order while their samples fit in S, each with
all its samples; the rays after the first one that does not fit get none.

Inputs and attributes: MetalOpsRayMarch's.
t_starts, t_ends, ray_indices: [S]; samples [0, num_samples) are
  MetalOpsRayMarch's first num_samples samples; the rest are padding:
  t_start = t_end = 0 and ray index max(R - 1, 0).
ray_offsets, ray_counts: [R], over the kept samples: rays [0, num_rays) as
  MetalOpsRayMarch returns them, the others count 0 and offset num_samples.
num_samples: int32 scalar, the samples kept.
num_rays: int32 scalar, the rays kept.
)doc");
