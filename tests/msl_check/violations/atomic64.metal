// atomic64: a 64-bit atomic counter.
#include <metal_stdlib>
using namespace metal;
kernel void k(device atomic_ulong* counter [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(counter, 1ul, memory_order_relaxed);
}
