// exceptions: a noexcept function (MSL has no exception handling).
#include <metal_stdlib>
inline float twice(float v) noexcept { return 2.0f * v; }
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  y[gid] = twice(y[gid]);
}
