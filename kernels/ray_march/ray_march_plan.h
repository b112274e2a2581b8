// RayMarch's Metal plans (shaders: kernels/ray_march/ray_march.metal, buffer
// indices kernels/ray_march/ray_march.h), two because the number of samples
// decides the outputs' shapes:
//   RayMarchCount: each ray's sample count (one thread per ray), then their
//     prefix sum (RayMarchScanParams: chunk sums, one thread scanning them and
//     writing the total, the chunks' offsets);
//   the caller reads the total once that plan has completed, allocates the
//     samples, then
//   RayMarchFill: each ray's samples from its offset on (one thread per ray).
// Every Metal path runs them (kernels/metal_plan/plan.h); none holds a queue
// while it waits for the count.
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_PLAN_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_PLAN_H_

#include <cstdint>

#include "kernels/ray_march/ray_march.h"
#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// The op's six inputs (the seed: one int32 the shaders read), at the same
// slots in both plans; each plan's own follow.
enum RayMarchInputSlots {
  kRmSlotOrigins,
  kRmSlotDirections,
  kRmSlotNear,
  kRmSlotFar,
  kRmSlotOccupancy,
  kRmSlotSeed,
  kRmInputSlots
};
enum RayMarchCountSlots {
  kRmSlotCounts = kRmInputSlots,  // int32 [R]
  kRmSlotOffsets,                 // int32 [R]
  kRmSlotTotal,                   // one uint64: the number of samples
  kRmCountSlots
};
enum RayMarchFillSlots {
  kRmFillSlotOffsets = kRmInputSlots,
  kRmFillSlotTStarts,     // float [total]
  kRmFillSlotTEnds,       // float [total]
  kRmFillSlotRayIndices,  // int32 [total]
  kRmFillSlots
};

// Threads of the prefix sum's chunked passes (RayMarchScanParams).
constexpr int32_t kRmScanThreads = 1024;

// p.num_rays > 0.
Plan RayMarchCount(const RayMarchParams& p);
// p.num_rays > 0 and a total > 0.
Plan RayMarchFill(const RayMarchParams& p);

}  // namespace metal_plan
}  // namespace mo

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_PLAN_H_
