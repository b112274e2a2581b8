// cxx-features: a lambda.
#include <metal_stdlib>
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  auto twice = [](float v) { return 2.0f * v; };
  y[gid] = twice(y[gid]);
}
