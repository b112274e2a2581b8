// The driver of packed_volume_render in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is its kernels/common formulas compiled by an arm64 compiler.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/packed_volume_render/packed_volume_render.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;

// ---- PackedVolumeRender (float): ints R, N, background_per_ray, with_weights;
// reals early_termination; arrays sigma, rgb, t_starts, t_ends, offsets,
// counts (as float32), background, then the cotangents. Outputs as VolumeRender.
void PackedVolumeRender(Request* q) {
  const int64_t R = q->Int(0), N = q->Int(1);
  const bool bg_per_ray = q->Int(2) != 0, with_weights = q->Int(3) != 0;
  const float early_termination = float(q->Real(0));
  const float* sigma = q->In<float>(0, N);
  const float* rgb = q->In<float>(1, N * 3);
  const float* t0 = q->In<float>(2, N);
  const float* t1 = q->In<float>(3, N);
  std::vector<mo::int32> offsets(R), counts(R);
  for (int64_t r = 0; r < R; ++r) {
    offsets[r] = mo::int32(q->In<float>(4, R)[r]);
    counts[r] = mo::int32(q->In<float>(5, R)[r]);
  }
  const float* bg = q->In<float>(6, bg_per_ray ? R * 3 : 3);
  const float* g_rgb = q->In<float>(7, R * 3);
  const float* g_depth = q->In<float>(8, R);
  const float* g_opacity = q->In<float>(9, R);
  const float* g_weights = q->In<float>(10, N);
  float* out_rgb = q->Out<float>(R * 3);
  float* depth = q->Out<float>(R);
  float* opacity = q->Out<float>(R);
  float* weights = q->Out<float>(N);
  float* grad_sigma = q->Out<float>(N);
  float* grad_rgb = q->Out<float>(N * 3);
  float* grad_bg = q->Out<float>(R * 3);
  const mo::PackedVolumeRenderForwardArgs<float> forward = {
      {R, N, bg_per_ray, early_termination, sigma, rgb, bg},
      {t0, t1, offsets.data(), counts.data()},
      {out_rgb, depth, opacity, weights}};
  const mo::PackedVolumeRenderBackwardArgs<float> backward = {
      {R, N, bg_per_ray, early_termination, sigma, rgb, bg},
      {t0, t1, offsets.data(), counts.data()},
      {out_rgb, depth, opacity, weights, g_rgb, g_depth, g_opacity, with_weights ? g_weights : nullptr, grad_sigma,
       grad_rgb, grad_bg}};
  for (int64_t r = 0; r < R; ++r) {
    const mo::VrCheck check = mo::pvr_forward_ray<float, mo::VrFloatMath>(forward, r);
    const mo::int32 code = mo::pvr_backward_ray<float, mo::VrFloatMath>(backward, r);
    if (check.code != mo::kVrOk || code != mo::kVrOk) {
      std::fprintf(stderr, "ray %lld is invalid\n", (long long)r);
      std::exit(3);
    }
  }
}

MO_NEON_OP("packed_volume_render", &PackedVolumeRender);

}  // namespace
