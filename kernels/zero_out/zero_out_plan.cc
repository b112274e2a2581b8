// ZeroOut's Metal plan (kernels/zero_out/zero_out_plan.h).
#include "kernels/zero_out/zero_out_plan.h"

#include <string>

#include "kernels/zero_out/zero_out.h"

namespace mo::metal_plan {

Plan ZeroOut(Dtype dtype, int64_t n, int64_t preserve_index) {
  return OnePass(kZeroOutSlots, "zero_out", std::string("zero_out_") + DtypeSuffix(dtype), static_cast<uint64_t>(n),
                 {{kZeroOutIn, kZeroOutInput}}, {{kZeroOutOut, kZeroOutOutput}}, kZeroOutParams,
                 ZeroOutParams{n, preserve_index});
}

}  // namespace mo::metal_plan
