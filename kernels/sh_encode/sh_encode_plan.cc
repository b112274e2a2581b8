// SHEncode's Metal plan (kernels/sh_encode/sh_encode_plan.h).
#include "kernels/sh_encode/sh_encode_plan.h"

#include <string>

#include "kernels/sh_encode/sh_encode.h"

namespace mo::metal_plan {

namespace {
std::string SHName(const char* kind, int degree, Dtype dtype) {
  return std::string("sh_encode_") + kind + "_d" + std::to_string(degree) + "_" + DtypeSuffix(dtype);
}
}  // namespace

Plan SHEncodeForward(Dtype dtype, int64_t n, int degree) {
  return OnePass(kSHEncodeSlots, "sh_encode", SHName("forward", degree, dtype), static_cast<uint64_t>(n),
                 {{kSHEncodeDirs, kSHEncodeSlotDirs}}, {{kSHEncodeValues, kSHEncodeSlotValues}}, kSHEncodeParams,
                 SHEncodeParams{n});
}

Plan SHEncodeBackward(Dtype dtype, int64_t n, int degree) {
  return OnePass(kSHEncodeGradSlots, "sh_encode", SHName("backward", degree, dtype), static_cast<uint64_t>(n),
                 {{kSHEncodeGradGrad, kSHEncodeGradSlotGrad}, {kSHEncodeGradDirs, kSHEncodeGradSlotDirs}},
                 {{kSHEncodeGradOut, kSHEncodeGradSlotOut}}, kSHEncodeGradParams, SHEncodeParams{n});
}

}  // namespace mo::metal_plan
