// threadgroup-memory: 36 KiB of threadgroup arrays in one kernel.
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float a[8192];
  threadgroup half b[1024];
  a[tid] = y[tid];
  b[tid] = half(y[tid]);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid] = a[8191u - tid] + float(b[1023u - tid]);
}
