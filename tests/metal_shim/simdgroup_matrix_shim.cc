// Small MSL-style kernels that pin down the MSL shim's threadgroups and
// simdgroup_matrix (tests/metal_shim/msl_shim.h, tests/metal_shim/threadgroups.cc):
// values of load/store (strides, transposes) and multiply-accumulate, and the
// errors for barriers and SIMD-group operations that not every thread
// reaches, lanes that disagree, and a read not ordered by a barrier. Driven
// by tests/test_fused_mlp_metal_shim.py.
#include <string>

#include "tests/metal_shim/msl_shim.h"

using namespace metal;

namespace {

std::string g_error;

struct MultiplyArgs {
  const void *a, *b;
  const float* c;
  float* d;
  int stride;
  bool transpose_a, transpose_b, half_operands;
};

// One SIMD-group: d = op(a) op(b) + c, every matrix 8x8 at row stride `stride`,
// staged through threadgroup memory (threads copy, barrier, cooperative load).
template <typename T>
void multiply(const MultiplyArgs& m, uint tid) {
  threadgroup T* ta = static_cast<T*>(msl_shim::threadgroup_memory());
  threadgroup T* tb = ta + 8 * m.stride;
  for (int i = int(tid); i < 8 * m.stride; i += 32) {
    ta[i] = static_cast<const T*>(m.a)[i];
    tb[i] = static_cast<const T*>(m.b)[i];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_matrix<T, 8, 8> a, b;
  simdgroup_float8x8 c;
  simdgroup_load(a, ta, ulong(m.stride), 0, m.transpose_a);
  simdgroup_load(b, tb, ulong(m.stride), 0, m.transpose_b);
  simdgroup_load(c, m.c, ulong(m.stride));
  simdgroup_multiply_accumulate(c, a, b, c);
  simdgroup_store(c, m.d, ulong(m.stride));
}

void MultiplyThread(void* arg, uint, uint t) {
  const MultiplyArgs& m = *static_cast<const MultiplyArgs*>(arg);
  if (m.half_operands) {
    multiply<half>(m, t);
  } else {
    multiply<float>(m, t);
  }
}

// Kernels that break MSL's rules (case 0..3); the shim must refuse each.
void BrokenThread(void* arg, uint, uint t) {
  const int which = *static_cast<const int*>(arg);
  threadgroup float* tg = static_cast<float*>(msl_shim::threadgroup_memory());
  if (which == 0) {  // a barrier only half the threads reach
    if (t >= 16) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else if (which == 1) {  // lanes load from different addresses
    simdgroup_float8x8 m;
    simdgroup_load(m, tg + (t % 2) * 64, 8);
  } else if (which == 2) {  // another lane's write read without a barrier
    tg[t] = float(t);
    simdgroup_float8x8 m;
    simdgroup_load(m, tg, 8);
  } else {  // SIMD-group operation in divergent control flow
    if (t % 32 < 31) {
      simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8>(1.0f);
      simdgroup_store(m, tg, 8);
    }
  }
}

}  // namespace

extern "C" {

const char* shim_simdgroup_error() { return g_error.c_str(); }

// d = op(a) op(b) + c (8x8, row stride `stride` >= 8); a and b float32, or
// float16 with `half_operands`. Returns 0 or -1 (shim_simdgroup_error()).
int shim_simdgroup_multiply(const void* a, const void* b, const float* c, float* d, int stride, int transpose_a,
                            int transpose_b, int half_operands) {
  MultiplyArgs m = {a, b, c, d, stride, transpose_a != 0, transpose_b != 0, half_operands != 0};
  const char* failed = msl_shim::run_threadgroups(1, 32, size_t(16) * 8 * stride * 4, false, &MultiplyThread, &m);
  g_error = failed ? failed : "";
  return failed ? -1 : 0;
}

// Runs broken kernel `which` (one threadgroup of 64 threads): 0 when the shim
// let it pass, -1 with its error in shim_simdgroup_error().
int shim_simdgroup_broken(int which) {
  const char* failed = msl_shim::run_threadgroups(1, 64, 1024, false, &BrokenThread, &which);
  g_error = failed ? failed : "";
  return failed ? -1 : 0;
}

}  // extern "C"
