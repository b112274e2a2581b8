// buffer-index: buffer index 31 (Metal's argument table has 0..30).
#include <metal_stdlib>
kernel void k(device float* y [[buffer(31)]], uint gid [[thread_position_in_grid]]) {
  y[gid] = 0.0f;
}
