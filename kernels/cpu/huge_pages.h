// Transparent huge pages for large CPU kernel buffers (host-only, Linux).
#ifndef MO_KERNELS_CPU_HUGE_PAGES_H_
#define MO_KERNELS_CPU_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1+; older kernels answer EINVAL, which is ignored
#endif
#endif

namespace mo {

// Backs a large buffer with transparent huge pages where the system allows it
// (THP in "madvise" mode is a common default). Random gathers and scatters into
// multi-megabyte tables miss the TLB with 4 KB pages, and a fresh output buffer
// (TF's allocator maps large ones anew on every call) takes one page fault per
// 4 KB when first written, 512x fewer with 2 MB pages; both are costly under
// virtualisation. Only a hint: contents
// are unchanged and failures are ignored. `collapse`: also rebuild pages that
// are already mapped (a table that lives across steps; done once per buffer);
// otherwise the hint takes effect when a fresh buffer is first touched.
// METAL_OPS_HUGE_PAGES=0 turns it off.
inline void AdviseHugePages(const void* data, size_t bytes, bool collapse) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool enabled = [] {
    const char* v = std::getenv("METAL_OPS_HUGE_PAGES");
    return v == nullptr || std::string(v) != "0";
  }();
  constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
  if (!enabled || bytes < 4 * kHugePage) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end <= begin) return;
  void* range = reinterpret_cast<void*>(begin);
  if (!collapse) {
    madvise(range, end - begin, MADV_HUGEPAGE);
    return;
  }
  // Collapsing costs a copy of the buffer: once per (address, size).
  static std::mutex mu;
  static uintptr_t done[8][2] = {};
  static int next = 0;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& d : done) {
    if (d[0] == begin && d[1] == end) return;
  }
  madvise(range, end - begin, MADV_HUGEPAGE);
  madvise(range, end - begin, MADV_COLLAPSE);
  done[next][0] = begin;
  done[next][1] = end;
  next = (next + 1) % 8;
#else
  (void)data;
  (void)bytes;
  (void)collapse;
#endif
}

}  // namespace mo

#endif  // MO_KERNELS_CPU_HUGE_PAGES_H_
