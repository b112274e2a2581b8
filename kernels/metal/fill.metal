// Zero-fill shader of the Metal plans (kernels/common/fill.h): one compute
// pass, so a zero-fill is ordered with the passes around it inside one
// compute encoder (no blit encoder between them). Words grid-stride, the
// last bytes % 4 bytes by thread 0.
#include "kernels/common/fill.h"

template <typename W>
[[kernel]] void fill_zero(device W* words [[buffer(mo::kFillWords)]], device uchar* bytes [[buffer(mo::kFillBytes)]],
                          constant mo::FillParams& p [[buffer(mo::kFillParams)]], uint gid [[thread_position_in_grid]],
                          uint grid_size [[threads_per_grid]]) {
  const mo::int64 num_words = p.bytes / 4;
  for (mo::int64 i = gid; i < num_words; i += grid_size) words[i] = W(0);
  if (gid == 0) {
    for (mo::int64 i = num_words * 4; i < p.bytes; ++i) bytes[i] = uchar(0);
  }
}

// The host name PlanBuilder::Zero asks for.
template [[host_name("fill_zero")]] [[kernel]] decltype(fill_zero<int>) fill_zero<int>;
