// The driver of distortion_loss in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is its kernels/common formulas compiled by an arm64 compiler.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/distortion_loss/distortion_loss.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;

// ---- DistortionLoss (float): ints R, S; arrays w [R, S], t [R, S + 1], grad
// [R]. Outputs loss, grad_w, grad_t.
void DistortionLoss(Request* q) {
  const int64_t R = q->Int(0), S = q->Int(1);
  const float* w = q->In<float>(0, R * S);
  const float* t = q->In<float>(1, R * (S + 1));
  const float* g = q->In<float>(2, R);
  float* loss = q->Out<float>(R);
  float* grad_w = q->Out<float>(R * S);
  float* grad_t = q->Out<float>(R * (S + 1));
  for (int64_t r = 0; r < R; ++r) {
    loss[r] = mo::distortion_loss_ray(w + r * S, t + r * (S + 1), S);
    mo::distortion_loss_grad_ray(g[r], w + r * S, t + r * (S + 1), S, grad_w + r * S, grad_t + r * (S + 1));
  }
}

MO_NEON_OP("distortion_loss", &DistortionLoss);

}  // namespace
