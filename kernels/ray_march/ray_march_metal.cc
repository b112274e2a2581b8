// RayMarch on Metal: the op's two Metal plans (shaders ray_march.metal, one
// thread per ray; every Metal path runs them: the CPU kernel's offload, the
// MSL shim, tensorflow-metal) and, on macOS, its kernel on the Metal
// PluggableDevice ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h).
//
// The number of samples decides the outputs' shapes, so the count plan
// (count, then the prefix sum with the total) runs with RunPlan(..., wait):
// its command buffer is submitted inside the stream's queue and waited for
// outside it (KernelCall::RunPlan with wait, host_path.h RunOnStream), the
// total is read from a shared buffer, the outputs are allocated, and the fill
// plan is encoded. The seed stays in device memory: the shaders read it.
#include <cstdint>

#include "kernels/ray_march/ray_march.h"

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

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

void Compute(void* kernel, mo::metal::KernelCall& call) {
  using mo::metal::DimsOf;
  const mo::ray_march::Attrs& attrs = *static_cast<mo::ray_march::Attrs*>(kernel);
  const std::vector<TF_Tensor*> in = call.Inputs(6);
  if (!call.ok() || !call.Check(mo::ray_march::Shapes(DimsOf(in[0]), DimsOf(in[1]), DimsOf(in[2]), DimsOf(in[3]),
                                                      DimsOf(in[4]), DimsOf(in[5]), attrs))) {
    return;
  }
  const int64_t rays = TF_Dim(in[0], 0);
  const mo::RayMarchParams params = mo::ray_march::MakeParams(attrs, rays, TF_Dim(in[4], 0));
  TF_Tensor* offsets = call.Output(3, TF_INT32, {rays});
  TF_Tensor* counts = call.Output(4, TF_INT32, {rays});
  if (!call.ok()) return;
  if (rays == 0) {
    for (int i = 0; i < 3; ++i) call.Output(i, i == 2 ? TF_INT32 : TF_FLOAT, {0});
    return;
  }
  mo::mtl::Buffer* total = call.SharedBuffer(sizeof(uint64_t));
  call.RunPlan(mo::metal_plan::RayMarchCount(params),
               {in[0], in[1], in[2], in[3], in[4], in[5], counts, offsets, total}, true);
  if (!call.ok()) return;
  const int64_t n = static_cast<int64_t>(*static_cast<const uint64_t*>(total->Contents()));
  if (!call.Check(mo::ray_march::TotalSamples(n))) return;
  TF_Tensor* t_starts = call.Output(0, TF_FLOAT, {n});
  TF_Tensor* t_ends = call.Output(1, TF_FLOAT, {n});
  TF_Tensor* ray_indices = call.Output(2, TF_INT32, {n});
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::RayMarchFill(params),
               {in[0], in[1], in[2], in[3], in[4], in[5], offsets, t_starts, t_ends, ray_indices});
}

const bool registered = mo::metal::RegisterWithAttrs<mo::ray_march::Attrs>(
    "MetalOpsRayMarch", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<Compute>);

}  // namespace
#endif  // __APPLE__
