// The vocabulary of the per-op check headers (kernels/<op>/<op>_spec.h): plain sizes
// and attribute values in, an error message out, no TensorFlow API. Each
// check and its message is written once there and reaches every kernel
// through a thin adapter: kernels/spec/checks_tf.h for the C++ API (CPU kernels, CUDA
// registrations, shape functions), mo::metal::KernelCall::Check for the
// C-API Metal kernels.
#ifndef MO_KERNELS_SPEC_CHECKS_H_
#define MO_KERNELS_SPEC_CHECKS_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mo {
namespace checks {

using Dims = std::vector<int64_t>;

// OK, or an invalid argument with its message.
struct Result {
  bool ok = true;
  std::string message;
};

inline Result Ok() { return Result(); }

// The message is the parts streamed one after the other.
template <typename... Parts>
Result Invalid(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return Result{false, out.str()};
}

// "[2,3]", as TensorFlow prints shapes.
inline std::string ShapeString(const Dims& dims) {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) s += (d ? "," : "") + std::to_string(dims[d]);
  return s + "]";
}

// Reads attributes of `op`, ("name", &value) pairs, with get(name, &value),
// the reader every ReadAttrs(get, &attrs) of a kernels/<op>/<op>_spec.h takes
// (true when it succeeded): kernels/spec/checks_tf.h's AttrGetter over TensorFlow's
// InferenceContext and OpKernelConstruction, the Metal glue's
// AttrReader::Getter over TF_OpKernelConstruction (which also keeps
// TensorFlow's own message for a failed read). Stops at the first failure.
template <typename Get>
Result ReadEach(Get&&, const char*) {
  return Result();
}

template <typename Get, typename T, typename... Rest>
Result ReadEach(Get&& get, const char* op, const char* name, T* value, Rest... rest) {
  if (!get(name, value)) return Invalid(op, ": could not read the attribute '", name, "'");
  return ReadEach(get, op, rest...);
}

// Returns from the enclosing function when `expr` (a Result) is not OK.
#define MO_RETURN_IF_INVALID(expr)            \
  do {                                        \
    ::mo::checks::Result mo_check_ = (expr);  \
    if (!mo_check_.ok) return mo_check_;      \
  } while (false)

}  // namespace checks

// The checks' vocabulary, unqualified in every op's spec (kernels/<op>/<op>_spec.h,
// namespace mo::<op>).
using checks::Dims;
using checks::Invalid;
using checks::Ok;
using checks::Result;
using checks::ShapeString;

}  // namespace mo

#endif  // MO_KERNELS_SPEC_CHECKS_H_
