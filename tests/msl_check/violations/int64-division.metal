// int64-division: a 64-bit remainder by a value known only at run time.
#include <metal_stdlib>
kernel void k(device float* y [[buffer(0)]], constant long& channels [[buffer(1)]],
              uint gid [[thread_position_in_grid]]) {
  y[gid] = float(long(gid) % channels);
}
