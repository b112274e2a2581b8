// A shader that follows every rule of tools/check/msl_check.py: the check must pass
// it (tests/test_msl_check.py). Each file in violations/ is this kind of
// shader with one rule broken.
#include <metal_stdlib>
using namespace metal;

struct Params {
  long count;
  uint width;
};

inline float scaled(const device float* x, long i, float s) { return x[i] * s; }

inline void store(thread float* out, float v) { *out = v; }

kernel void clean_kernel(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         device atomic_uint* counter [[buffer(2)]], constant Params& p [[buffer(3)]],
                         uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  threadgroup float shared[256];
  shared[gid % 256u] = 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (long i = gid; i < p.count; i += grid_size) {
    float v = 0.0f;
    store(&v, scaled(x, i, 2.0f));
    y[i] = metal::fmax(v, 0.0f) + float(uint(i) % p.width) + float(i / 8);
  }
  if (gid == 0) atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
}
