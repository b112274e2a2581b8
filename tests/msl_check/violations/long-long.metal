// long-long: an unsigned long long literal.
#include <metal_stdlib>
kernel void k(device ulong* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  y[gid] = y[gid] & 0xffffffffull;
}
