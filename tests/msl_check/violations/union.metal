// union: type punning through a union (MSL: as_type).
#include <metal_stdlib>
union Bits {
  float f;
  uint u;
};
kernel void k(device uint* y [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  Bits b;
  b.f = float(gid);
  y[gid] = b.u;
}
