// GaussianTileBin on Metal: the op's two Metal plans (shaders
// gaussian_tile_bin.metal; every Metal path runs them: the CPU kernel's
// offload, the MSL shim, tensorflow-metal) and, on macOS, its kernel on the
// Metal PluggableDevice ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h).
//
// The number of intersections decides gaussian_ids' shape, so the count plan
// runs with RunPlan(..., wait), as RayMarch's: its command buffer is
// submitted inside the stream's queue and waited for outside it, the total is
// read from a shared buffer, the outputs are allocated, and the fill plan is
// encoded. The fill plan counts and scans again rather than keeping the
// offsets between the calls, so each plan stands alone.
#include <cstdint>

#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"

namespace mo::metal_plan {
namespace {

GaussianTileBinParams ParamsOf(int64_t n, int64_t m, const gaussian_tile_bin::Attrs& a) {
  return GaussianTileBinParams{n, m, gaussian_tile_bin::Tiles(a), a.tile_size, gaussian_tile_bin::TilesX(a),
                               gaussian_tile_bin::TilesY(a), 0};
}

// The in-place exclusive scan of `length` uint64 in scratch `data`, its total to scratch `total`.
void Scan(PlanBuilder& b, int data, uint64_t length, int total_scratch, int total_slot) {
  const GtbScanParams s = {length, (length + kGtbScanThreads - 1) / kGtbScanThreads};
  b.Threadgroups("gaussian_tile_bin", "gaussian_tile_bin_scan", 1, kGtbScanThreads,
                 uint32_t(kGtbScanThreads * sizeof(uint64_t)))
      .Scratch(kGtbScanData, data)
      .Value(kGtbScanParams, s);
  if (total_slot >= 0) {
    b.Output(kGtbScanTotal, total_slot);
  } else {
    b.Scratch(kGtbScanTotal, total_scratch);
  }
}

// Each Gaussian's tile count into scratch `offsets`, then their exclusive scan.
void CountAndScan(PlanBuilder& b, const GaussianTileBinParams& p, int offsets, int total_scratch, int total_slot) {
  b.Threads("gaussian_tile_bin", "gaussian_tile_bin_count", uint64_t(p.num_gaussians))
      .Tensors({{kGtbMeans2d, kGtbSlotMeans2d}, {kGtbRadii, kGtbSlotRadii}}, {})
      .Scratch(kGtbOffsets, offsets)
      .Value(kGtbParams, p);
  Scan(b, offsets, uint64_t(p.num_gaussians), total_scratch, total_slot);
}

}  // namespace

Plan GaussianTileBinCount(int64_t n, const gaussian_tile_bin::Attrs& a) {
  PlanBuilder b(kGtbCountSlots);
  const int offsets = b.NewScratch(uint64_t(n) * sizeof(uint64_t));
  CountAndScan(b, ParamsOf(n, 0, a), offsets, -1, kGtbSlotTotal);
  return b.Finish();
}

Plan GaussianTileBinFill(int64_t n, int64_t m, const gaussian_tile_bin::Attrs& a) {
  static_assert(int(kGtbFillSlotMeans2d) == int(kGtbSlotMeans2d) && int(kGtbFillSlotRadii) == int(kGtbSlotRadii),
                "the count passes bind the same input slots in both plans");
  PlanBuilder b(kGtbFillSlots);
  const GaussianTileBinParams p = ParamsOf(n, m, a);
  if (m == 0) {
    b.Zero(kGtbFillSlotTileRanges, uint64_t(p.tiles) * 2 * sizeof(int32_t));
    return b.Finish();
  }
  const uint64_t items = uint64_t(kGtbSortThreads) * kGtbSortItems;
  const uint32_t groups = uint32_t((uint64_t(m) + items - 1) / items);
  const int offsets = b.NewScratch(uint64_t(n) * sizeof(uint64_t));
  const int total = b.NewScratch(sizeof(uint64_t));
  const int keys[2] = {b.NewScratch(uint64_t(m) * sizeof(uint64_t)), b.NewScratch(uint64_t(m) * sizeof(uint64_t))};
  const int ids = b.NewScratch(uint64_t(m) * sizeof(int32_t));  // buffer 0's ids; buffer 1's are gaussian_ids
  const int hist = b.NewScratch(uint64_t(kGtbRadix) * groups * sizeof(uint64_t));
  CountAndScan(b, p, offsets, total, -1);
  // The passes alternate between the two buffers so that the last one writes buffer 1.
  const int passes = (gtb_key_bits(p.tiles) + 7) / 8;
  auto bind_ids = [&](int buffer, uint32_t index, bool write) -> PlanBuilder& {
    if (buffer == 0) return b.Scratch(index, ids);
    return write ? b.Output(index, kGtbFillSlotGaussianIds) : b.Tensor(index, kGtbFillSlotGaussianIds);
  };
  int source = passes % 2 == 0 ? 1 : 0;
  b.Threads("gaussian_tile_bin", "gaussian_tile_bin_keys", uint64_t(n))
      .Tensors({{kGtbMeans2d, kGtbFillSlotMeans2d}, {kGtbRadii, kGtbFillSlotRadii}, {kGtbDepths, kGtbFillSlotDepths}},
               {})
      .Scratch(kGtbOffsets, offsets)
      .Scratch(kGtbKeys, keys[source])
      .Value(kGtbParams, p);
  bind_ids(source, kGtbIds, true);
  const uint32_t tg_bytes = uint32_t(kGtbSortThreads * kGtbRadix * sizeof(uint16_t));
  for (int pass = 0; pass < passes; ++pass) {
    const GtbSortParams s = {uint32_t(m), groups, uint32_t(8 * pass), 0};
    b.Threadgroups("gaussian_tile_bin", "gaussian_tile_bin_digits", groups, kGtbSortThreads, tg_bytes)
        .Scratch(kGtbSortKeys, keys[source])
        .Scratch(kGtbSortHist, hist)
        .Value(kGtbSortParams, s);
    Scan(b, hist, uint64_t(kGtbRadix) * groups, total, -1);
    const int target = 1 - source;
    b.Threadgroups("gaussian_tile_bin", "gaussian_tile_bin_scatter", groups, kGtbSortThreads, tg_bytes)
        .Scratch(kGtbSortKeys, keys[source])
        .Scratch(kGtbSortHist, hist)
        .Scratch(kGtbSortKeysOut, keys[target])
        .Value(kGtbSortParams, s);
    bind_ids(source, kGtbSortIds, false);
    bind_ids(target, kGtbSortIdsOut, true);
    source = target;
  }
  b.Threads("gaussian_tile_bin", "gaussian_tile_bin_ranges", uint64_t(p.tiles))
      .Scratch(kGtbRangesKeys, keys[1])
      .Output(kGtbRangesOut, kGtbFillSlotTileRanges)
      .Value(kGtbRangesParams, p);
  return b.Finish();
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

// The count plan and its read-back (n > 0 Gaussians), then the outputs and the fill plan.
void TileBin(void* kernel, mo::metal::KernelCall& call) {
  const auto& a = *static_cast<const mo::gaussian_tile_bin::Attrs*>(kernel);
  const std::vector<TF_Tensor*> in = call.Inputs(3);
  if (!call.ok() ||
      !call.Check(mo::gaussian_tile_bin::Shapes(mo::metal::DimsOf(in[0]), mo::metal::DimsOf(in[1]),
                                                mo::metal::DimsOf(in[2])))) {
    return;
  }
  const int64_t n = TF_Dim(in[0], 0);
  int64_t m = 0;
  if (n > 0) {
    mo::mtl::Buffer* total = call.SharedBuffer(sizeof(uint64_t));
    call.RunPlan(mo::metal_plan::GaussianTileBinCount(n, a), {in[0], in[1], total}, true);
    if (!call.ok()) return;
    m = static_cast<int64_t>(*static_cast<const uint64_t*>(total->Contents()));
  }
  if (!call.Check(mo::gaussian_tile_bin::Intersections(m))) return;
  TF_Tensor* ids = call.Output(0, TF_INT32, {m});
  TF_Tensor* ranges = call.Output(1, TF_INT32, {mo::gaussian_tile_bin::Tiles(a), 2});
  if (call.ok()) call.RunPlan(mo::metal_plan::GaussianTileBinFill(n, m, a), {in[0], in[1], in[2], ids, ranges});
}

const bool registered = mo::metal::RegisterWithAttrs<mo::gaussian_tile_bin::Attrs>(
    "MetalOpsGaussianTileBin", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<TileBin>);

}  // namespace
#endif  // __APPLE__
