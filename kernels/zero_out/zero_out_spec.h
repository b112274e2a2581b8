// ZeroOut's attribute and input check, written once for every kernel of the
// op and its shape function: the CPU and CUDA kernels (through
// kernels/zero_out/zero_out_kernel.h) and the Metal kernel (through KernelCall::Check).
// No TensorFlow API: sizes and attributes in, kernels/spec/checks.h's Result out.
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_SPEC_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_SPEC_H_

#include <cstdint>

#include "kernels/spec/checks.h"

namespace mo {
namespace zero_out {

struct Attrs {
  int64_t preserve_index = 0;
};

// Reads the attributes (kernels/spec/checks.h ReadEach; the op's registration keeps
// preserve_index >= 0, the input's size bounds it from above: PreserveIndex).
template <typename Get>
checks::Result ReadAttrs(Get&& get, Attrs* a) {
  return checks::ReadEach(get, "ZeroOut", "preserve_index", &a->preserve_index);
}

// preserve_index names an element of an input of n elements (any index when
// the input is empty: there is nothing to keep).
inline checks::Result PreserveIndex(int64_t preserve_index, int64_t n) {
  if (preserve_index < 0 || (n > 0 && preserve_index >= n)) {
    return checks::Invalid("ZeroOut: preserve_index ", preserve_index, " is out of range for input 'to_zero' with ", n,
                           " elements");
  }
  return checks::Ok();
}

}  // namespace zero_out
}  // namespace mo

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_SPEC_H_
