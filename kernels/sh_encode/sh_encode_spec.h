// SHEncode's attribute and shape checks, written once for every kernel of the
// op: the shape functions (ops/sh_encode_op.cc), the CPU kernels and CUDA
// registrations (through kernels/spec/checks_tf.h) and the Metal kernels (through
// KernelCall::Check). No TensorFlow API: sizes in, kernels/spec/checks.h's Result out.
// A dimension of -1 is unknown (shape functions) and matches any size.
// Messages name the argument; tests match on them. The dtype is the op's
// attribute T: {float, half} (TensorFlow rejects others before any kernel
// runs); the Python wrapper says so naming 'dirs'.
#ifndef MO_KERNELS_SH_ENCODE_SH_ENCODE_SPEC_H_
#define MO_KERNELS_SH_ENCODE_SH_ENCODE_SPEC_H_

#include <cstdint>

#include "kernels/sh_encode/sh_encode.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace sh_encode {

inline Result Degree(int64_t degree) {
  if (degree < 1 || degree > MO_SH_MAX_DEGREE) {
    return Invalid("SHEncode: 'degree' must be 1, 2, 3 or 4 (1, 4, 9 or 16 values per direction), got ", degree);
  }
  return Ok();
}

// The attributes of SHEncode and SHEncodeGrad.
struct Attrs {
  int degree = 0;
};

// Reads (kernels/spec/checks.h ReadEach) and checks the attributes: the one attribute
// read of the shape functions, the kernel classes and the Metal kernels.
template <typename Get>
Result ReadAttrs(Get&& get, Attrs* a) {
  int64_t degree = 0;  // read wide: a huge value gets Degree's message
  MO_RETURN_IF_INVALID(checks::ReadEach(get, "SHEncode", "degree", &degree));
  MO_RETURN_IF_INVALID(Degree(degree));
  a->degree = static_cast<int>(degree);
  return Ok();
}

// dirs [..., 3]: at least one dimension, the last one 3 (x, y, z).
inline Result DirsShape(const Dims& dirs) {
  if (dirs.empty()) return Invalid("SHEncode: 'dirs' must be [..., 3] (x, y, z along the last axis), got a scalar");
  if (dirs.back() != 3 && dirs.back() != -1) {
    return Invalid("SHEncode: 'dirs' must be [..., 3] (x, y, z along the last axis), got shape ", ShapeString(dirs));
  }
  return Ok();
}

// The values' shape: dirs' with the last dimension degree**2.
inline Dims OutputDims(const Dims& dirs, int64_t degree) {
  Dims out = dirs;
  out.back() = degree * degree;
  return out;
}

// The upstream gradient of SHEncodeGrad: the values' shape.
inline Result GradShape(const Dims& grad, const Dims& dirs, int64_t degree) {
  const Dims want = OutputDims(dirs, degree);
  bool same = grad.size() == want.size();
  for (size_t d = 0; same && d < want.size(); ++d) same = grad[d] == want[d] || grad[d] == -1 || want[d] == -1;
  if (!same) {
    return Invalid("SHEncodeGrad: 'grad' must have the values' shape ", ShapeString(want), " for 'dirs' ",
                   ShapeString(dirs), " and degree ", degree, ", got ", ShapeString(grad));
  }
  return Ok();
}

// The checks of SHEncode's shape function and kernels, dirs, and the values'
// dims; of SHEncodeGrad's, dirs then the upstream gradient
// (kernels/spec/pointwise_op.h, kernels/framework/pointwise_kernel.h).
inline Result Shapes(const Attrs& a, const Dims& dirs, Dims* values) {
  MO_RETURN_IF_INVALID(DirsShape(dirs));
  *values = OutputDims(dirs, a.degree);
  return Ok();
}

inline Result GradShapes(const Attrs& a, const Dims& grad, const Dims& dirs) {
  MO_RETURN_IF_INVALID(DirsShape(dirs));
  return GradShape(grad, dirs, a.degree);
}

}  // namespace sh_encode
}  // namespace mo

#endif  // MO_KERNELS_SH_ENCODE_SH_ENCODE_SPEC_H_
