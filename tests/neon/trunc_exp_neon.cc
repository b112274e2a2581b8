// The driver of trunc_exp in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is the vectors of kernels/cpu/simd.h.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MO_CPU_BODIES  // trunc_exp.h's CPU bodies
#include "kernels/trunc_exp/trunc_exp.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;
using mo_neon::Shards;

// ---- TruncExp (float): ints n, shards; arrays x, dy. Outputs y, dx.
void TruncExp(Request* q) {
  const int64_t n = q->Int(0);
  const Shards shards{int(q->Int(1))};
  const float* x = q->In<float>(0, n);
  const float* dy = q->In<float>(1, n);
  float* y = q->Out<float>(n);
  float* dx = q->Out<float>(n);
  shards(n, [&](int64_t begin, int64_t end) {
    mo::trunc_exp_cpu::Forward(x, y, begin, end);
    mo::trunc_exp_cpu::Backward(dy, x, dx, begin, end);
  });
}

MO_NEON_OP("trunc_exp", &TruncExp);

}  // namespace
