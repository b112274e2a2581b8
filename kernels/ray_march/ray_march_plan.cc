// RayMarch's Metal plans (kernels/ray_march/ray_march_plan.h).
#include "kernels/ray_march/ray_march_plan.h"

namespace mo {
namespace metal_plan {
namespace {

// The op's inputs (RayMarchInputSlots), the first slots of both plans.
PlanBuilder& BindInputs(PlanBuilder& b) {
  return b.Tensors({{kRmOrigins, kRmSlotOrigins}, {kRmDirections, kRmSlotDirections}, {kRmNear, kRmSlotNear},
                    {kRmFar, kRmSlotFar}, {kRmOccupancy, kRmSlotOccupancy}, {kRmSeed, kRmSlotSeed}},
                   {});
}

}  // namespace

Plan RayMarchCount(const RayMarchParams& p) {
  const RayMarchScanParams scan = rm_scan_params(p.num_rays, kRmScanThreads);
  PlanBuilder b(kRmCountSlots);
  const int sums = b.NewScratch(uint64_t(scan.chunks) * sizeof(uint64_t));
  BindInputs(b.Threads("ray_march", "ray_march_count", uint64_t(p.num_rays)))
      .Output(kRmCountCounts, kRmSlotCounts)
      .Value(kRmCountParams, p);
  b.Threads("ray_march", "ray_march_chunk_sums", uint64_t(scan.chunks))
      .Tensor(kRmChunkSumsCounts, kRmSlotCounts)
      .Scratch(kRmChunkSumsSums, sums)
      .Value(kRmChunkSumsParams, scan);
  b.Threads("ray_march", "ray_march_scan_chunk_sums", 1)
      .Scratch(kRmScanSums, sums)
      .Output(kRmScanTotal, kRmSlotTotal)
      .Value(kRmScanParams, scan);
  b.Threads("ray_march", "ray_march_offsets", uint64_t(scan.chunks))
      .Tensor(kRmOffsetsCounts, kRmSlotCounts)
      .Scratch(kRmOffsetsSums, sums)
      .Output(kRmOffsetsOut, kRmSlotOffsets)
      .Value(kRmOffsetsParams, scan);
  return b.Finish();
}

Plan RayMarchFill(const RayMarchParams& p) {
  PlanBuilder b(kRmFillSlots);
  BindInputs(b.Threads("ray_march", "ray_march_fill", uint64_t(p.num_rays)))
      .Tensors({{kRmFillOffsets, kRmFillSlotOffsets}},
               {{kRmFillTStarts, kRmFillSlotTStarts}, {kRmFillTEnds, kRmFillSlotTEnds},
                {kRmFillRayIndices, kRmFillSlotRayIndices}})
      .Value(kRmFillParams, p);
  return b.Finish();
}

}  // namespace metal_plan
}  // namespace mo
