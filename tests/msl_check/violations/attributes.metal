// attributes: a misspelt builtin attribute (clang here would ignore it).
#include <metal_stdlib>
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_gird]]) {
  y[gid] = 0.0f;
}
