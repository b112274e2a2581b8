// The C++-API adapter of the per-op spec headers (kernels/spec/checks.h): tensor and
// shape sizes in, absl::Status out, and the attribute read of the shape
// functions (ops/) and kernel classes (kernels/framework/op_kernel_with_attrs.h). The
// C-API Metal kernels have their own (KernelCall::Check).
#ifndef MO_KERNELS_SPEC_CHECKS_TF_H_
#define MO_KERNELS_SPEC_CHECKS_TF_H_

#include <array>
#include <cstddef>
#include <utility>

#include "absl/strings/cord.h"
#include "kernels/spec/checks.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/errors.h"

namespace mo {
namespace checks {

// The payload that carries a failed check's own message (kSpecPayload):
// TensorFlow adds the node to an error's text, the payload stays as written,
// and the Python layers read it (metal_ops._args.spec_message).
constexpr char kSpecPayload[] = "metal_ops.spec";

inline absl::Status ToStatus(const Result& result) {
  if (result.ok) return absl::OkStatus();
  absl::Status status = ::tensorflow::errors::InvalidArgument(result.message);
  status.SetPayload(kSpecPayload, absl::Cord(result.message));
  return status;
}

inline Dims DimsOf(const ::tensorflow::TensorShape& shape) {
  Dims dims(static_cast<size_t>(shape.dims()));
  for (int d = 0; d < shape.dims(); ++d) dims[d] = shape.dim_size(d);
  return dims;
}

inline Dims DimsOf(const ::tensorflow::Tensor& tensor) { return DimsOf(tensor.shape()); }

// The dims of a shape function's input `index` (-1 where unknown); false when
// its rank is unknown.
inline bool KnownDims(::tensorflow::shape_inference::InferenceContext* c, int index, Dims* dims) {
  const ::tensorflow::shape_inference::ShapeHandle s = c->input(index);
  if (!c->RankKnown(s)) return false;
  dims->resize(c->Rank(s));
  for (int d = 0; d < c->Rank(s); ++d) (*dims)[d] = c->Value(c->Dim(s, d));
  return true;
}

// A shape function's inputs first, first + 1, ... of the ranks `ranks`, in
// that order; their shapes into *shapes.
template <size_t N>
absl::Status InputRanks(::tensorflow::shape_inference::InferenceContext* c, int first, const int (&ranks)[N],
                        std::array<::tensorflow::shape_inference::ShapeHandle, N>* shapes) {
  for (size_t i = 0; i < N; ++i) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(first + static_cast<int>(i)), ranks[i], &(*shapes)[i]));
  }
  return absl::OkStatus();
}

// The attribute reader an op's ReadAttrs(get, attrs) takes, over TensorFlow's
// InferenceContext (shape functions) or OpKernelConstruction (kernels): both
// have GetAttr(name, T*).
template <typename Ctx>
struct AttrGetterOf {
  Ctx* ctx;
  template <typename T>
  bool operator()(const char* name, T* value) const {
    return ctx->GetAttr(name, value).ok();
  }
};

template <typename Ctx>
AttrGetterOf<Ctx> AttrGetter(Ctx* ctx) {
  return AttrGetterOf<Ctx>{ctx};
}

// ReadAttrsOf(ctx, [op,] &attrs): the op's ReadAttrs(get, [op,] &attrs)
// (kernels/<op>/<op>_spec.h, found by the type of `attrs`) over ctx, as a status:
// the attribute read of every shape function and kernel constructor.
template <typename Ctx, typename... Args>
absl::Status ReadAttrsOf(Ctx* ctx, Args&&... args) {
  return ToStatus(ReadAttrs(AttrGetter(ctx), std::forward<Args>(args)...));
}

}  // namespace checks
}  // namespace mo

#endif  // MO_KERNELS_SPEC_CHECKS_TF_H_
