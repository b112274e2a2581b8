// RayMarch's attributes and input checks, written once for every kernel of
// the op and its shape function: the attributes are read and checked by
// ReadAttrs (docs/ARCHITECTURE.md, "Attributes") and turned into the
// RayMarchParams every backend takes. No TensorFlow API:
// sizes and values in, kernels/spec/checks.h's Result out. Messages name the argument;
// tests match on them.
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_SPEC_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_SPEC_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ray_march/ray_march.h"
#include "kernels/spec/checks.h"

namespace mo {
namespace ray_march {

// Every index the kernels compute is a 32-bit int (the Metal shaders avoid
// 64-bit arithmetic): rays, cells and samples stay below this.
constexpr int64_t kMaxIndex = 2147483647;
constexpr int kMaxCascades = 16;
constexpr int kMaxGridResolution = 1024;

struct Attrs {
  std::vector<float> aabb;
  int grid_resolution = 0;
  float step_size = 0.f;
  float cone_angle = 0.f;
  float max_step_size = 0.f;
  int max_samples = 0;
  bool jitter = false;
};

inline bool Finite(float x) { return std::isfinite(x); }

// The attributes' values.
inline Result CheckAttrs(const Attrs& a) {
  if (a.aabb.size() != 6) {
    return Invalid("RayMarch: 'aabb' must be [min_x, min_y, min_z, max_x, max_y, max_z], got ", a.aabb.size(),
                   " values");
  }
  for (int i = 0; i < 3; ++i) {
    if (!Finite(a.aabb[i]) || !Finite(a.aabb[i + 3]) || !(a.aabb[i] < a.aabb[i + 3])) {
      return Invalid("RayMarch: 'aabb' must be finite with min < max on every axis, got [", a.aabb[i], ", ",
                     a.aabb[i + 3], "] on axis ", i);
    }
  }
  if (a.grid_resolution < 1 || a.grid_resolution > kMaxGridResolution) {
    return Invalid("RayMarch: 'grid_resolution' must be in [1, ", kMaxGridResolution, "], got ", a.grid_resolution);
  }
  if (!Finite(a.step_size) || !(a.step_size > 0.f)) {
    return Invalid("RayMarch: 'step_size' must be finite and > 0, got ", a.step_size);
  }
  if (!Finite(a.cone_angle) || !(a.cone_angle >= 0.f)) {
    return Invalid("RayMarch: 'cone_angle' must be finite and >= 0, got ", a.cone_angle);
  }
  if (!(a.max_step_size >= a.step_size)) {
    return Invalid("RayMarch: 'max_step_size' must be >= step_size = ", a.step_size, ", got ", a.max_step_size);
  }
  if (a.max_samples < 1) return Invalid("RayMarch: 'max_samples' must be >= 1, got ", a.max_samples);
  return Ok();
}

// Reads (kernels/spec/checks.h ReadEach) and checks the attributes: the one attribute
// read of the shape function, the kernel class and the Metal kernel.
template <typename Get>
Result ReadAttrs(Get&& get, Attrs* a) {
  MO_RETURN_IF_INVALID(checks::ReadEach(get, "RayMarch", "aabb", &a->aabb, "grid_resolution", &a->grid_resolution,
                                        "step_size", &a->step_size, "cone_angle", &a->cone_angle, "max_step_size",
                                        &a->max_step_size, "max_samples", &a->max_samples, "jitter", &a->jitter));
  return CheckAttrs(*a);
}

// The attributes from plain values, checked (the CUDA harness and the MSL
// shim runner, which have no TensorFlow to read them from).
inline Result AttrsFromValues(const float* aabb, int grid_resolution, float step_size, float cone_angle,
                              float max_step_size, int max_samples, bool jitter, Attrs* a) {
  a->aabb.assign(aabb, aabb + 6);
  a->grid_resolution = grid_resolution;
  a->step_size = step_size;
  a->cone_angle = cone_angle;
  a->max_step_size = max_step_size;
  a->max_samples = max_samples;
  a->jitter = jitter;
  return CheckAttrs(*a);
}

// origins [R, 3], directions [R, 3], near [R], far [R], occupancy
// [C, ceil(G^3 / 8)] (uint8 bitfield), seed [] (int32).
inline Result Shapes(const Dims& origins, const Dims& directions, const Dims& near, const Dims& far,
                     const Dims& occupancy, const Dims& seed, const Attrs& a) {
  if (origins.size() != 2 || origins[1] != 3) {
    return Invalid("RayMarch: 'origins' must be [R, 3], got ", ShapeString(origins));
  }
  const int64_t rays = origins[0];
  if (rays > kMaxIndex) return Invalid("RayMarch: at most ", kMaxIndex, " rays, got ", rays);
  if (directions != Dims{rays, 3}) {
    return Invalid("RayMarch: 'directions' must be [R, 3] = [", rays, ",3] like 'origins', got ",
                   ShapeString(directions));
  }
  if (near != Dims{rays}) return Invalid("RayMarch: 'near' must be [R] = [", rays, "], got ", ShapeString(near));
  if (far != Dims{rays}) return Invalid("RayMarch: 'far' must be [R] = [", rays, "], got ", ShapeString(far));
  const int64_t bytes = rm_bytes_per_cascade(a.grid_resolution);
  if (occupancy.size() != 2 || occupancy[1] != bytes || occupancy[0] < 1 || occupancy[0] > kMaxCascades) {
    return Invalid("RayMarch: 'occupancy' must be a uint8 bitfield [C, ceil(G^3 / 8)] = [C, ", bytes,
                   "] for grid_resolution G = ", a.grid_resolution, " with 1 <= C <= ", kMaxCascades, ", got ",
                   ShapeString(occupancy));
  }
  const int64_t g = a.grid_resolution;
  if (occupancy[0] * g * g * g > kMaxIndex) {
    return Invalid("RayMarch: 'occupancy' has C G^3 = ", occupancy[0] * g * g * g, " cells; at most ", kMaxIndex);
  }
  if (!seed.empty()) return Invalid("RayMarch: 'seed' must be a scalar, got ", ShapeString(seed));
  return Ok();
}

// The total sample count of the march (the prefix sum of the per-ray counts).
inline Result TotalSamples(int64_t total) {
  if (total > kMaxIndex) {
    return Invalid("RayMarch: the rays have ", total, " samples in all; at most ", kMaxIndex,
                   ": lower max_samples or march fewer rays at once");
  }
  return Ok();
}

// RayMarchStatic (ops/ray_march_op.cc): RayMarch's attributes plus the
// sample budget S, the static size of the sample outputs.
constexpr const char kStaticOp[] = "RayMarchStatic";

struct StaticAttrs {
  Attrs march;
  int sample_budget = 0;
};

inline Result CheckSampleBudget(int64_t sample_budget) {
  if (sample_budget < 0 || sample_budget > kMaxIndex) {
    return Invalid(kStaticOp, ": 'sample_budget' must be in [0, ", kMaxIndex, "], got ", sample_budget);
  }
  return Ok();
}

template <typename Get>
Result ReadAttrs(Get&& get, StaticAttrs* a) {
  MO_RETURN_IF_INVALID(ReadAttrs(get, &a->march));
  MO_RETURN_IF_INVALID(checks::ReadEach(get, kStaticOp, "sample_budget", &a->sample_budget));
  return CheckSampleBudget(a->sample_budget);
}

// The parameters every backend's kernels take.
inline RayMarchParams MakeParams(const Attrs& a, int64_t rays, int64_t cascades) {
  RayMarchParams p{};
  for (int i = 0; i < 3; ++i) {
    p.aabb_min[i] = a.aabb[i];
    p.aabb_max[i] = a.aabb[i + 3];
  }
  p.step_size = a.step_size;
  p.cone_angle = a.cone_angle;
  p.max_step_size = a.max_step_size;
  p.num_rays = static_cast<int32_t>(rays);
  p.grid_resolution = a.grid_resolution;
  p.cascades = static_cast<int32_t>(cascades);
  p.bytes_per_cascade = rm_bytes_per_cascade(a.grid_resolution);
  p.max_samples = a.max_samples;
  p.max_iterations = rm_max_iterations(a.max_samples, a.grid_resolution, p.cascades);
  p.jitter = a.jitter ? 1 : 0;
  return p;
}

}  // namespace ray_march
}  // namespace mo

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_SPEC_H_
