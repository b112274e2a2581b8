// The driver of sh_encode in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is its kernels/common formulas compiled by an arm64 compiler.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/sh_encode/sh_encode.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;

// ---- SHEncode (float): ints n, degree; arrays dirs [n, 3], grad [n, degree^2].
// Outputs values, grad_dirs.
void SHEncode(Request* q) {
  const int64_t n = q->Int(0);
  const int degree = int(q->Int(1)), k = degree * degree;
  const float* dirs = q->In<float>(0, n * 3);
  const float* grad = q->In<float>(1, n * k);
  float* values = q->Out<float>(n * k);
  float* grad_dirs = q->Out<float>(n * 3);
  for (int64_t i = 0; i < n; ++i) {
    mo::sh_encode_values(dirs[3 * i], dirs[3 * i + 1], dirs[3 * i + 2], degree, values + i * k, 1);
    mo::sh_encode_grad(dirs[3 * i], dirs[3 * i + 1], dirs[3 * i + 2], degree, grad + i * k, 1, grad_dirs + 3 * i,
                       grad_dirs + 3 * i + 1, grad_dirs + 3 * i + 2);
  }
}

MO_NEON_OP("sh_encode", &SHEncode);

}  // namespace
