// compile: a function MSL does not have (expm1 is not in metal_stdlib).
#include <metal_stdlib>
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  y[gid] = metal::expm1(y[gid]);
}
