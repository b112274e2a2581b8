// mip-NeRF 360's distortion loss in the O(S) prefix-sum form of DVGOv2
// (arXiv 2206.05085), written once for the CPU kernels, CUDA and Metal.
//
// For one ray with weights w[0..S) and sorted interval edges t[0..S]:
//   m_i = (t_i + t_{i+1}) / 2,  d_i = t_{i+1} - t_i
//   L = sum_{i,j} w_i w_j |m_i - m_j| + 1/3 sum_i w_i^2 d_i
//     = sum_i [ 2 w_i (m_i W_{<i} - (wm)_{<i}) + 1/3 w_i^2 d_i ]
//   dL/dw_i = 2/3 w_i d_i + 2 [m_i (W_{<i} - W_{>i}) + (wm)_{>i} - (wm)_{<i}]
//   dL/dm_i = 2 w_i (W_{<i} - W_{>i}),  dL/dd_i = w_i^2 / 3
//   dL/dt_k = (dL/dm_{k-1} + dL/dm_k) / 2 + dL/dd_{k-1} - dL/dd_k
// (terms with an index outside [0, S) are zero). W and (wm) are prefix /
// suffix sums of w and w*m. Midpoints are taken relative to t_0 (L does not
// change under a shift of t), which keeps m W - (wm) free of cancellation
// when t is far from 0. Ties m_i = m_j count j < i as "below" (a subgradient).
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
struct DistortionLossParams {
  int64 num_rays;     // R
  int64 num_samples;  // S: weights are [R, S], t is [R, S + 1]
};

// The shaders' buffer indices (distortion_loss.metal, kernels/distortion_loss/distortion_loss_plan.cc).
enum DistortionLossBuffers {
  kDistortionLossW = 0,       // forward: weights
  kDistortionLossT = 1,       // forward: t
  kDistortionLossLoss = 2,    // forward: loss
  kDistortionLossParams = 3,  // forward: DistortionLossParams
  kDistortionLossGradGrad = 0,
  kDistortionLossGradW = 1,
  kDistortionLossGradT = 2,
  kDistortionLossGradDw = 3,
  kDistortionLossGradDt = 4,
  kDistortionLossGradParams = 5,
};

// Midpoint of interval [t0, t1] relative to the ray's origin t_first.
MO_FN float dl_mid(float t0, float t1, float t_first) {
  return 0.5f * ((t0 - t_first) + (t1 - t_first));
}

// Contribution of sample i to L, given the exclusive prefix sums W_{<i}, (wm)_{<i}.
MO_FN float dl_sample_loss(float w, float m, float d, float w_below, float wm_below) {
  return 2.0f * w * (m * w_below - wm_below) + (1.0f / 3.0f) * w * w * d;
}

// dL/dw_i from the prefix (below) and suffix (above) sums.
MO_FN float dl_sample_grad_w(float w, float m, float d, float w_below, float wm_below,
                             float w_above, float wm_above) {
  return (2.0f / 3.0f) * w * d + 2.0f * (m * (w_below - w_above) + wm_above - wm_below);
}

// dL/dm_i and dL/dd_i.
MO_FN float dl_sample_grad_m(float w, float w_below, float w_above) {
  return 2.0f * w * (w_below - w_above);
}
MO_FN float dl_sample_grad_d(float w) { return (1.0f / 3.0f) * w * w; }

// dL/dt_k from dL/dm and dL/dd of the intervals on its left (k-1) and right (k).
MO_FN float dl_grad_t(float gm_left, float gd_left, float gm_right, float gd_right) {
  return 0.5f * (gm_left + gm_right) + gd_left - gd_right;
}

// Index of the first k with t[k+1] < t[k] (t not sorted), or -1.
MO_FN int64 dl_first_decrease(const MO_DEVICE float* t, int64 num_samples) {
  for (int64 k = 0; k < num_samples; ++k) {
    if (!(t[k + 1] >= t[k])) return k;  // NaN counts as a decrease
  }
  return -1;
}

// L for one ray, serially (CPU kernels and the Metal shader run one ray per
// thread; CUDA splits a ray over a warp with the same per-sample terms).
// Returns NaN when t is not sorted.
MO_FN float distortion_loss_ray(const MO_DEVICE float* w, const MO_DEVICE float* t,
                                int64 num_samples) {
  if (num_samples > 0 && dl_first_decrease(t, num_samples) >= 0) return NAN;
  float w_below = 0.0f, wm_below = 0.0f, loss = 0.0f;
  const float t_first = num_samples > 0 ? t[0] : 0.0f;
  for (int64 i = 0; i < num_samples; ++i) {
    const float wi = w[i];
    const float m = dl_mid(t[i], t[i + 1], t_first);
    const float d = t[i + 1] - t[i];
    loss += dl_sample_loss(wi, m, d, w_below, wm_below);
    w_below += wi;
    wm_below += wi * m;
  }
  return loss;
}

// g * dL/dw and g * dL/dt for one ray, serially (two passes: totals, then terms).
// Writes NaN gradients when t is not sorted.
MO_FN void distortion_loss_grad_ray(float g, const MO_DEVICE float* w, const MO_DEVICE float* t,
                                    int64 num_samples, MO_DEVICE float* grad_w,
                                    MO_DEVICE float* grad_t) {
  if (num_samples > 0 && dl_first_decrease(t, num_samples) >= 0) {
    for (int64 i = 0; i < num_samples; ++i) grad_w[i] = NAN;
    for (int64 k = 0; k <= num_samples; ++k) grad_t[k] = NAN;
    return;
  }
  if (num_samples == 0) {
    grad_t[0] = 0.0f;
    return;
  }
  const float t_first = t[0];
  float w_total = 0.0f, wm_total = 0.0f;
  for (int64 i = 0; i < num_samples; ++i) {
    w_total += w[i];
    wm_total += w[i] * dl_mid(t[i], t[i + 1], t_first);
  }
  float w_below = 0.0f, wm_below = 0.0f, gm_left = 0.0f, gd_left = 0.0f;
  for (int64 i = 0; i < num_samples; ++i) {
    const float wi = w[i];
    const float m = dl_mid(t[i], t[i + 1], t_first);
    const float d = t[i + 1] - t[i];
    const float w_above = w_total - w_below - wi;
    const float wm_above = wm_total - wm_below - wi * m;
    grad_w[i] = g * dl_sample_grad_w(wi, m, d, w_below, wm_below, w_above, wm_above);
    const float gm = dl_sample_grad_m(wi, w_below, w_above);
    const float gd = dl_sample_grad_d(wi);
    grad_t[i] = g * dl_grad_t(gm_left, gd_left, gm, gd);
    gm_left = gm;
    gd_left = gd;
    w_below += wi;
    wm_below += wi * m;
  }
  grad_t[num_samples] = g * dl_grad_t(gm_left, gd_left, 0.0f, 0.0f);
}

}  // namespace mo

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_H_
