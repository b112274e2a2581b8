// The driver of volume_render in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is Eigen's NEON packets in phase B.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MO_CPU_BODIES  // volume_render.h's CPU bodies
#include "kernels/volume_render/volume_render.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;
using mo_neon::Shards;

// ---- VolumeRender: ints R, S, background_per_ray, with_weights, shards; reals
// early_termination; arrays sigma, rgb, t, background, then the cotangents of
// rgb, depth, opacity, weights. Outputs rgb, depth, opacity, weights,
// grad_sigma, grad_rgb (samples), grad_background (per ray).
template <typename T>
void VolumeRender(Request* q) {
  using namespace mo::volume_render_cpu;  // NOLINT
  const int64_t R = q->Int(0), S = q->Int(1);
  const bool bg_per_ray = q->Int(2) != 0, with_weights = q->Int(3) != 0;
  const Shards shards{int(q->Int(4))};
  const double early_termination = q->Real(0);
  const T* sigma = q->In<T>(0, R * S);
  const T* rgb = q->In<T>(1, R * S * 3);
  const T* t = q->In<T>(2, R * (S + 1));
  const T* bg = q->In<T>(3, bg_per_ray ? R * 3 : 3);
  const T* g_rgb = q->In<T>(4, R * 3);
  const T* g_depth = q->In<T>(5, R);
  const T* g_opacity = q->In<T>(6, R);
  const T* g_weights = q->In<T>(7, R * S);
  T* out_rgb = q->Out<T>(R * 3);
  T* depth = q->Out<T>(R);
  T* opacity = q->Out<T>(R);
  T* weights = q->Out<T>(R * S);
  T* grad_sigma = q->Out<T>(R * S);
  T* grad_rgb = q->Out<T>(R * S * 3);
  T* grad_bg = q->Out<T>(R * 3);
  const mo::VolumeRenderForwardArgs<T> forward = {
      {R, S, bg_per_ray, float(early_termination), sigma, rgb, bg}, {t}, {out_rgb, depth, opacity, weights}};
  const mo::VolumeRenderBackwardArgs<T> backward = {
      {R, S, bg_per_ray, float(early_termination), sigma, rgb, bg},
      {t},
      {out_rgb, depth, opacity, with_weights ? weights : nullptr, g_rgb, g_depth, g_opacity,
       with_weights ? g_weights : nullptr, grad_sigma, grad_rgb, grad_bg}};
  shards(R, [&](int64_t begin, int64_t end) {
    RayScratch<T> scratch(S);
    for (int64_t r = begin; r < end; ++r) {
      if (!AllValid(sigma + r * S, t + r * (S + 1), S)) {
        std::fprintf(stderr, "ray %lld is invalid\n", (long long)r);
        std::exit(3);
      }
      ForwardRay(&scratch, forward, r);
    }
  });
  shards(R, [&](int64_t begin, int64_t end) {
    RayScratch<T> scratch(S);
    for (int64_t r = begin; r < end; ++r) BackwardRay(&scratch, backward, r);
  });
}

MO_NEON_OP("volume_render", &VolumeRender<float>);
MO_NEON_OP("volume_render_f64", &VolumeRender<double>);

}  // namespace
