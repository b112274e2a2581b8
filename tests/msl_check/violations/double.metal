// double: a double variable.
#include <metal_stdlib>
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  double v = y[gid];
  y[gid] = float(v);
}
