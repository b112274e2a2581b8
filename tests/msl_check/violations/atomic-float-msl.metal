// atomic-float-msl: atomic_float in a shader without `// metal_ops: msl 3.0`.
#include <metal_stdlib>
using namespace metal;
kernel void k(device atomic_float* sum [[buffer(0)]], device const float* x [[buffer(1)]],
              uint gid [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(sum, x[gid], memory_order_relaxed);
}
