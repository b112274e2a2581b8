// address-space: a device pointer passed as an unqualified (MSL: thread) one.
#include <metal_stdlib>
inline void twice(float* v) { *v *= 2.0f; }
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  twice(y + gid);
}
