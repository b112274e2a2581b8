// The driver of robust_loss in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is Eigen's NEON packets in log and exp.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MO_CPU_BODIES  // robust_loss.h's CPU bodies
#include "kernels/robust_loss/robust_loss.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;
using mo_neon::Shards;

// ---- RobustLoss (float): ints n, channels, shards; arrays x, grad, alpha,
// scale (channels each). Outputs rho, grad * drho/dx, and per channel the sums
// of grad * drho/dalpha and grad * drho/dscale (float64).
void RobustLoss(Request* q) {
  const int64_t n = q->Int(0), channels = q->Int(1);
  const Shards shards{int(q->Int(2))};
  const float* x = q->In<float>(0, n);
  const float* g = q->In<float>(1, n);
  const float* alpha = q->In<float>(2, channels);
  const float* scale = q->In<float>(3, channels);
  std::vector<mo::RobustLossCoeffs> coeffs(channels);
  for (int64_t c = 0; c < channels; ++c) coeffs[c] = mo::robust_loss_coeffs(alpha[c], scale[c]);
  float* y = q->Out<float>(n);
  float* dx = q->Out<float>(n);
  double* sum_a = q->Out<double>(channels);
  double* sum_c = q->Out<double>(channels);
  mo::robust_loss_cpu::Forward(coeffs, x, y, n, shards);
  mo::robust_loss_cpu::Backward(coeffs, g, x, dx, n, sum_a, sum_c, shards);
}

MO_NEON_OP("robust_loss", &RobustLoss);

}  // namespace
