// ZeroOut: every element becomes zero except the one at `preserve_index`.
// The tutorial op; kept deliberately tiny so it shows the layering, not math.
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of the Metal dispatch (same layout in the shader and on the host).
struct ZeroOutParams {
  int64 num_elements;
  int64 preserve_index;
};

// The shader's buffer indices (zero_out.metal, kernels/zero_out/zero_out_plan.cc).
enum ZeroOutBuffers {
  kZeroOutIn = 0,
  kZeroOutOut = 1,
  kZeroOutParams = 2,  // ZeroOutParams
};

// Value of output element `i` given input element `x`.
template <typename T>
MO_FN T zero_out_element(T x, int64 i, int64 preserve_index) {
  return i == preserve_index ? x : T(0);
}

}  // namespace mo

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_H_
