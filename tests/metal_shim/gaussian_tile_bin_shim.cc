// Runs GaussianTileBin's radix-sort shaders on the CPU (see
// tests/metal_shim/msl_shim.h): one 8-bit pass of the fill plan of
// kernels/gaussian_tile_bin/gaussian_tile_bin_metal.cc (the digit counts,
// their scan, the scatter) as cooperating threadgroups, their threads run in
// order or reversed between barriers.
#include <vector>

#include "tests/metal_shim/msl_shim.h"
#include "gaussian_tile_bin.metal"  // the expanded source the library embeds ($(BUILD)/gen)

namespace {

struct PassCall {
  const ulong* keys;
  const int* ids;
  ulong* hist;
  ulong* keys_out;
  int* ids_out;
  ulong* total;
  mo::GtbSortParams s;
  mo::GtbScanParams scan;
};

void Digits(void* arg, uint group, uint index) {
  PassCall& c = *static_cast<PassCall*>(arg);
  gaussian_tile_bin_digits(c.keys, c.hist, c.s, static_cast<ushort*>(msl_shim::threadgroup_memory()), group, index,
                           uint(mo::kGtbSortThreads));
}

void Scan(void* arg, uint /*group*/, uint index) {
  PassCall& c = *static_cast<PassCall*>(arg);
  gaussian_tile_bin_scan(c.hist, c.total, c.scan, static_cast<ulong*>(msl_shim::threadgroup_memory()), index,
                         uint(mo::kGtbScanThreads));
}

void Scatter(void* arg, uint group, uint index) {
  PassCall& c = *static_cast<PassCall*>(arg);
  gaussian_tile_bin_scatter(c.keys, c.ids, c.hist, c.keys_out, c.ids_out, c.s,
                            static_cast<ushort*>(msl_shim::threadgroup_memory()), group, index,
                            uint(mo::kGtbSortThreads));
}

}  // namespace

extern "C" {

// One radix pass over keys[0, m) at bit `shift` into keys_out / ids_out;
// nullptr, or what went wrong.
const char* shim_gaussian_tile_bin_radix_pass(const ulong* keys, const int* ids, ulong* keys_out, int* ids_out,
                                              uint m, uint shift, int reverse) {
  const uint items = uint(mo::kGtbSortThreads) * uint(mo::kGtbSortItems);
  const uint groups = (m + items - 1) / items;
  std::vector<ulong> hist(size_t(mo::kGtbRadix) * groups);
  ulong total = 0;
  const ulong length = ulong(mo::kGtbRadix) * groups;
  PassCall c = {keys, ids, hist.data(), keys_out, ids_out, &total, {m, groups, shift, 0},
                {length, (length + mo::kGtbScanThreads - 1) / mo::kGtbScanThreads}};
  const unsigned long counts_bytes = sizeof(ushort) * mo::kGtbSortThreads * mo::kGtbRadix;
  if (const char* failed =
          msl_shim::run_threadgroups(groups, mo::kGtbSortThreads, counts_bytes, reverse != 0, &Digits, &c)) {
    return failed;
  }
  if (const char* failed = msl_shim::run_threadgroups(1, mo::kGtbScanThreads, sizeof(ulong) * mo::kGtbScanThreads,
                                                      reverse != 0, &Scan, &c)) {
    return failed;
  }
  if (total != m) return "the digit counts do not add up to m";
  return msl_shim::run_threadgroups(groups, mo::kGtbSortThreads, counts_bytes, reverse != 0, &Scatter, &c);
}

}  // extern "C"
