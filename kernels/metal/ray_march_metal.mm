// RayMarch on the Metal PluggableDevice ("GPU" with tensorflow-metal), through
// the shared glue (metal_kernel.h). Shaders: ray_march.metal (one thread per
// ray, kernels/common/ray_march.h).
//
// The number of samples decides the outputs' shapes, so the first pass
// (count, then the prefix sum) is committed and waited for and its total read
// from a shared buffer on the CPU before the outputs are allocated and the
// second pass (fill) is encoded. The seed stays in device memory: the shaders
// read it.
#import "kernels/metal/metal_kernel.h"

#include <cstdint>
#include <string>

#include "kernels/common/ray_march.h"
#include "kernels/spec/ray_march_spec.h"

namespace {

using mo::metal::DimsOf;

// Threads of the prefix sum's chunked dispatches (RayMarchScanParams).
constexpr mo::int32 kScanThreads = 1024;

void Compute(void* kernel, mo::metal::KernelCall& call) {
  const mo::ray_march::Attrs& attrs = *static_cast<mo::ray_march::Attrs*>(kernel);
  TF_Tensor* in[6];
  for (int i = 0; i < 6; ++i) in[i] = call.Input(i);
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
  const mo::RayMarchScanParams scan = mo::rm_scan_params(params.num_rays, kScanThreads);
  id<MTLComputePipelineState> count = call.Pipeline("ray_march", "ray_march_count");
  id<MTLComputePipelineState> chunk_sums = call.Pipeline("ray_march", "ray_march_chunk_sums");
  id<MTLComputePipelineState> scan_sums = call.Pipeline("ray_march", "ray_march_scan_chunk_sums");
  id<MTLComputePipelineState> chunk_offsets = call.Pipeline("ray_march", "ray_march_offsets");
  id<MTLComputePipelineState> fill = call.Pipeline("ray_march", "ray_march_fill");
  TF_Tensor* sums = call.Temp(TF_UINT64, {scan.chunks});
  id<MTLBuffer> total = call.SharedBuffer(sizeof(uint64_t));
  if (!call.ok()) return;
  // The op's inputs, bound once for both marching passes.
  auto bind_inputs = [&](mo::metal::Encoder& e) {
    e.Tensor(mo::kRmOrigins, in[0]).Tensor(mo::kRmDirections, in[1]).Tensor(mo::kRmNear, in[2]);
    e.Tensor(mo::kRmFar, in[3]).Tensor(mo::kRmOccupancy, in[4]).Tensor(mo::kRmSeed, in[5]);
  };
  call.EncodeAndWait([&](mo::metal::Encoder& e) {
    bind_inputs(e);
    e.Tensor(mo::kRmCountCounts, counts).Value(mo::kRmCountParams, params);
    e.Dispatch(count, static_cast<uint64_t>(rays));
    e.Tensor(mo::kRmChunkSumsCounts, counts).Tensor(mo::kRmChunkSumsSums, sums).Value(mo::kRmChunkSumsParams, scan);
    e.Dispatch(chunk_sums, static_cast<uint64_t>(scan.chunks));
    e.Tensor(mo::kRmScanSums, sums).Buffer(mo::kRmScanTotal, total).Value(mo::kRmScanParams, scan).Dispatch(scan_sums, 1);
    e.Tensor(mo::kRmOffsetsCounts, counts).Tensor(mo::kRmOffsetsSums, sums).Tensor(mo::kRmOffsetsOut, offsets);
    e.Value(mo::kRmOffsetsParams, scan);
    e.Dispatch(chunk_offsets, static_cast<uint64_t>(scan.chunks));
  });
  if (!call.ok()) return;
  const int64_t n = static_cast<int64_t>(*static_cast<const uint64_t*>(total.contents));
  if (!call.Check(mo::ray_march::TotalSamples(n))) return;
  TF_Tensor* t_starts = call.Output(0, TF_FLOAT, {n});
  TF_Tensor* t_ends = call.Output(1, TF_FLOAT, {n});
  TF_Tensor* ray_indices = call.Output(2, TF_INT32, {n});
  if (!call.ok() || n == 0) return;
  call.Encode([&](mo::metal::Encoder& e) {
    bind_inputs(e);
    e.Tensor(mo::kRmFillOffsets, offsets).Tensor(mo::kRmFillTStarts, t_starts).Tensor(mo::kRmFillTEnds, t_ends);
    e.Tensor(mo::kRmFillRayIndices, ray_indices).Value(mo::kRmFillParams, params);
    e.Dispatch(fill, static_cast<uint64_t>(rays));
  });
}

const bool registered = mo::metal::RegisterWithAttrs<mo::ray_march::Attrs>(
    "MetalOpsRayMarch", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<Compute>);

}  // namespace
