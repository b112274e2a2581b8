// GaussianTileBin on Metal: the op's two Metal plans and GaussianTileBinStatic's
// one (shaders gaussian_tile_bin.metal; every Metal path runs them: the CPU
// kernels' offload, the MSL shim, tensorflow-metal) and, on macOS, the two
// ops' kernels on the Metal PluggableDevice ("GPU" with tensorflow-metal)
// through the shared glue (kernels/metal/metal_kernel.h).
//
// The number of intersections decides gaussian_ids' shape, so the count plan
// runs with RunPlan(..., wait), as RayMarch's: its command buffer is
// submitted inside the stream's queue and waited for outside it, the total is
// read from a shared buffer, the outputs are allocated, and the fill plan is
// encoded. The fill plan counts and scans again rather than keeping the
// offsets between the calls, so each plan stands alone. GaussianTileBinStatic's
// outputs have a static size: its one plan cuts at the budget on the GPU and
// nothing is read back.
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

// A stable radix sort of m keys with their ids: two buffers of each, the
// passes alternating between them so that the last one writes buffer 1,
// whose ids are the plan's output slot `ids_slot` (buffer 0's a scratch).
struct RadixSort {
  RadixSort(PlanBuilder& builder, uint64_t keys_to_sort, int64_t tiles, int output_ids_slot)
      : b(builder),
        m(keys_to_sort),
        groups(uint32_t((m + kGtbSortThreads * kGtbSortItems - 1) / (kGtbSortThreads * kGtbSortItems))),
        passes((gtb_key_bits(tiles) + 7) / 8),
        keys{b.NewScratch(m * sizeof(uint64_t)), b.NewScratch(m * sizeof(uint64_t))},
        ids(b.NewScratch(m * sizeof(int32_t))),
        hist(b.NewScratch(uint64_t(kGtbRadix) * groups * sizeof(uint64_t))),
        hist_total(b.NewScratch(sizeof(uint64_t))),
        ids_slot(output_ids_slot) {}

  // The buffer the unsorted keys go to.
  int First() const { return passes % 2 == 0 ? 1 : 0; }

  // Buffer `buffer`'s ids at shader index `index`.
  PlanBuilder& BindIds(int buffer, uint32_t index, bool write) {
    if (buffer == 0) return b.Scratch(index, ids);
    return write ? b.Output(index, ids_slot) : b.Tensor(index, ids_slot);
  }

  // The passes, from buffer First() to buffer 1.
  void Passes() {
    const uint32_t tg_bytes = uint32_t(kGtbSortThreads * kGtbRadix * sizeof(uint16_t));
    int source = First();
    for (int pass = 0; pass < passes; ++pass) {
      const GtbSortParams s = {uint32_t(m), groups, uint32_t(8 * pass), 0};
      b.Threadgroups("gaussian_tile_bin", "gaussian_tile_bin_digits", groups, kGtbSortThreads, tg_bytes)
          .Scratch(kGtbSortKeys, keys[source])
          .Scratch(kGtbSortHist, hist)
          .Value(kGtbSortParams, s);
      Scan(b, hist, uint64_t(kGtbRadix) * groups, hist_total, -1);
      const int target = 1 - source;
      b.Threadgroups("gaussian_tile_bin", "gaussian_tile_bin_scatter", groups, kGtbSortThreads, tg_bytes)
          .Scratch(kGtbSortKeys, keys[source])
          .Scratch(kGtbSortHist, hist)
          .Scratch(kGtbSortKeysOut, keys[target])
          .Value(kGtbSortParams, s);
      BindIds(source, kGtbSortIds, false);
      BindIds(target, kGtbSortIdsOut, true);
      source = target;
    }
  }

  PlanBuilder& b;
  const uint64_t m;
  const uint32_t groups;
  const int passes;
  const int keys[2], ids, hist, hist_total, ids_slot;
};

// Each Gaussian's keys and ids from its offset on, into the sort's first
// buffer: `function` is gaussian_tile_bin_keys (every Gaussian) or
// gaussian_tile_bin_keys_kept (the kept ones; its limits bound after).
PlanBuilder& Keys(PlanBuilder& b, const GaussianTileBinParams& p, RadixSort& sort, int offsets, const char* function) {
  static_assert(int(kGtbFillSlotMeans2d) == int(kGtbStaticSlotMeans2d) &&
                    int(kGtbFillSlotRadii) == int(kGtbStaticSlotRadii) &&
                    int(kGtbFillSlotDepths) == int(kGtbStaticSlotDepths),
                "both plans bind the same input slots");
  b.Threads("gaussian_tile_bin", function, uint64_t(p.num_gaussians))
      .Tensors({{kGtbMeans2d, kGtbFillSlotMeans2d}, {kGtbRadii, kGtbFillSlotRadii}, {kGtbDepths, kGtbFillSlotDepths}},
               {})
      .Scratch(kGtbOffsets, offsets)
      .Scratch(kGtbKeys, sort.keys[sort.First()])
      .Value(kGtbParams, p);
  return sort.BindIds(sort.First(), kGtbIds, true);
}

// Each tile's range among the first count[0] keys of sorted buffer 1.
void Ranges(PlanBuilder& b, const GaussianTileBinParams& p, const RadixSort& sort, int count, int ranges_slot) {
  b.Threads("gaussian_tile_bin", "gaussian_tile_bin_ranges", uint64_t(p.tiles))
      .Scratch(kGtbRangesKeys, sort.keys[1])
      .Output(kGtbRangesOut, ranges_slot)
      .Value(kGtbRangesParams, p)
      .Scratch(kGtbRangesCount, count);
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
  RadixSort sort(b, uint64_t(m), p.tiles, kGtbFillSlotGaussianIds);
  const int offsets = b.NewScratch(uint64_t(n) * sizeof(uint64_t));
  const int total = b.NewScratch(sizeof(uint64_t));  // m
  CountAndScan(b, p, offsets, total, -1);
  Keys(b, p, sort, offsets, "gaussian_tile_bin_keys");
  sort.Passes();
  Ranges(b, p, sort, total, kGtbFillSlotTileRanges);
  return b.Finish();
}

Plan GaussianTileBinStatic(int64_t n, const gaussian_tile_bin::StaticAttrs& a) {
  static_assert(int(kGtbStaticSlotMeans2d) == int(kGtbSlotMeans2d) && int(kGtbStaticSlotRadii) == int(kGtbSlotRadii),
                "the count passes bind the same input slots in both plans");
  PlanBuilder b(kGtbStaticSlots);
  const uint64_t budget = uint64_t(a.max_intersections);
  const GaussianTileBinParams p = ParamsOf(n, int64_t(budget), a);
  RadixSort sort(b, budget, p.tiles, kGtbStaticSlotGaussianIds);
  const int limits = b.NewScratch(2 * sizeof(uint64_t));  // {m, kept Gaussians}
  if (n > 0) {
    const int offsets = b.NewScratch(uint64_t(n) * sizeof(uint64_t));
    const int total = b.NewScratch(sizeof(uint64_t));
    CountAndScan(b, p, offsets, total, -1);
    b.Threads("gaussian_tile_bin", "gaussian_tile_bin_cut", 1)
        .Scratch(kGtbCutOffsets, offsets)
        .Scratch(kGtbCutTotal, total)
        .Scratch(kGtbCutLimits, limits)
        .Output(kGtbCutNumIntersections, kGtbStaticSlotNumIntersections)
        .Output(kGtbCutNumGaussians, kGtbStaticSlotNumGaussians)
        .Value(kGtbCutParams, p);
    Keys(b, p, sort, offsets, "gaussian_tile_bin_keys_kept").Scratch(kGtbKeysLimits, limits);
  } else {
    b.ZeroScratch(limits, 2 * sizeof(uint64_t));
    b.Zero(kGtbStaticSlotNumIntersections, sizeof(int32_t));
    b.Zero(kGtbStaticSlotNumGaussians, sizeof(int32_t));
  }
  b.Threads("gaussian_tile_bin", "gaussian_tile_bin_pad", budget)
      .Scratch(kGtbPadKeys, sort.keys[sort.First()])
      .Scratch(kGtbPadLimits, limits)
      .Value(kGtbPadParams, p);
  sort.BindIds(sort.First(), kGtbPadIds, true);
  sort.Passes();
  Ranges(b, p, sort, limits, kGtbStaticSlotTileRanges);
  return b.Finish();
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

// Whether the three inputs came and have the op's shapes (else the call's error is set).
bool CheckedInputs(mo::metal::KernelCall& call, const std::vector<TF_Tensor*>& in) {
  return call.ok() && call.Check(mo::gaussian_tile_bin::Shapes(mo::metal::DimsOf(in[0]), mo::metal::DimsOf(in[1]),
                                                               mo::metal::DimsOf(in[2])));
}

// The count plan and its read-back (n > 0 Gaussians), then the outputs and the fill plan.
void TileBin(void* kernel, mo::metal::KernelCall& call) {
  const auto& a = *static_cast<const mo::gaussian_tile_bin::Attrs*>(kernel);
  const std::vector<TF_Tensor*> in = call.Inputs(3);
  if (!CheckedInputs(call, in)) return;
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

// The static outputs and the one plan, no wait.
void TileBinStatic(void* kernel, mo::metal::KernelCall& call) {
  const auto& a = *static_cast<const mo::gaussian_tile_bin::StaticAttrs*>(kernel);
  const std::vector<TF_Tensor*> in = call.Inputs(3);
  if (!CheckedInputs(call, in)) return;
  TF_Tensor* ids = call.Output(0, TF_INT32, {a.max_intersections});
  TF_Tensor* ranges = call.Output(1, TF_INT32, {mo::gaussian_tile_bin::Tiles(a), 2});
  TF_Tensor* num_intersections = call.Output(2, TF_INT32, {});
  TF_Tensor* num_gaussians = call.Output(3, TF_INT32, {});
  if (call.ok()) {
    call.RunPlan(mo::metal_plan::GaussianTileBinStatic(TF_Dim(in[0], 0), a),
                 {in[0], in[1], in[2], ids, ranges, num_intersections, num_gaussians});
  }
}

const bool registered = mo::metal::RegisterWithAttrs<mo::gaussian_tile_bin::Attrs>(
    "MetalOpsGaussianTileBin", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<TileBin>);
const bool registered_static = mo::metal::RegisterWithAttrs<mo::gaussian_tile_bin::StaticAttrs>(
    "MetalOpsGaussianTileBinStatic", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<TileBinStatic>);

}  // namespace
#endif  // __APPLE__
