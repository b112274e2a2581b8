// function-pointer: a function called through a reference to it (C++ for
// OpenCL rejects `float (*)(float)`, not `float (&)(float)`).
#include <metal_stdlib>
inline float twice(float v) { return 2.0f * v; }
inline float apply(float (&f)(float), float v) { return f(v); }
kernel void k(device float* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  y[gid] = apply(twice, y[gid]);
}
