// The zero-fill pass of a Metal plan (kernels/metal/fill.metal,
// kernels/metal_plan/plan.h PlanBuilder::Zero): the first `bytes` bytes of a
// buffer set to 0, 4-byte words first, then the tail bytes.
#ifndef MO_KERNELS_COMMON_FILL_H_
#define MO_KERNELS_COMMON_FILL_H_

#include "kernels/common/platform.h"

namespace mo {

struct FillParams {
  int64 bytes;
};

enum FillBuffers {
  kFillWords = 0,   // the buffer, as 4-byte words
  kFillBytes = 1,   // the same buffer, as bytes (the tail)
  kFillParams = 2,  // FillParams
};

}  // namespace mo

#endif  // MO_KERNELS_COMMON_FILL_H_
