// The driver of ray_march in tests/neon/cpu_ops_main.cc (the request format
// there): its CPU kernel's TF-free body, compiled for arm64, where what
// differs is its kernels/common formulas compiled by an arm64 compiler.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/ray_march/ray_march.h"
#include "tests/neon/cpu_ops.h"

namespace {

using mo_neon::Request;

// ---- RayMarch: ints R, grid_resolution, cascades, max_samples, jitter, seed;
// reals aabb (6), step_size, cone_angle, max_step_size; arrays origins [R, 3],
// directions [R, 3], near [R], far [R] (float32), occupancy [C, G^3 / 8]
// (uint8). Outputs t_starts, t_ends, ray_indices, offsets, counts (the
// integers as float64), as the CPU kernel's count and fill passes make them.
void RayMarch(Request* q) {
  const int64_t R = q->Int(0);
  mo::ray_march::Attrs attrs;
  for (int i = 0; i < 6; ++i) attrs.aabb[i] = float(q->Real(i));
  attrs.grid_resolution = int(q->Int(1));
  attrs.step_size = float(q->Real(6));
  attrs.cone_angle = float(q->Real(7));
  attrs.max_step_size = float(q->Real(8));
  attrs.max_samples = int(q->Int(3));
  attrs.jitter = q->Int(4) != 0;
  const mo::RayMarchParams p = mo::ray_march::MakeParams(attrs, R, q->Int(2));
  const mo::RayMarchInputs in = {q->In<float>(0, R * 3), q->In<float>(1, R * 3), q->In<float>(2, R),
                                  q->In<float>(3, R),
                                  q->In<unsigned char>(4, int64_t(p.cascades) * p.bytes_per_cascade),
                                  mo::uint32(q->Int(5))};
  std::vector<mo::int32> counts(R), offsets(R);
  int64_t total = 0;
  for (int64_t r = 0; r < R; ++r) {
    counts[r] = mo::rm_march_ray(in, mo::int32(r), p, 0, mo::RayMarchSamples{nullptr, nullptr, nullptr});
    offsets[r] = mo::int32(total);
    total += counts[r];
  }
  float* t_starts = q->Out<float>(total);
  float* t_ends = q->Out<float>(total);
  std::vector<mo::int32> indices(total);
  const mo::RayMarchSamples samples = {t_starts, t_ends, indices.data()};
  for (int64_t r = 0; r < R; ++r) mo::rm_march_ray(in, mo::int32(r), p, offsets[r], samples);
  for (const std::vector<mo::int32>* v : {&indices, &offsets, &counts}) {
    double* out = q->Out<double>(int64_t(v->size()));
    for (size_t i = 0; i < v->size(); ++i) out[i] = (*v)[i];
  }
}

MO_NEON_OP("ray_march", &RayMarch);

}  // namespace
