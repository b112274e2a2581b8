// recursion: a function that calls itself.
#include <metal_stdlib>
inline uint fact(uint n) { return n < 2u ? 1u : n * fact(n - 1u); }
kernel void k(device uint* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  y[gid] = fact(gid);
}
