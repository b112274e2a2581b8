// Ray marching through an occupancy bitfield (instant-NGP / nerfacc style),
// written once for the CPU kernels, CUDA and Metal.
//
// Cascade c (0 <= c < C) is the AABB scaled by 2^c about its centre, split in
// G^3 cells; cell (x, y, z) of cascade c is bit x + G (y + G z) of that
// cascade's ceil(G^3 / 8) bytes (least significant bit first). A ray is
// marched from max(near, entry into the outermost cascade) to
// min(far, exit from it) with steps
//   dt(t) = clamp(t * cone_angle, step_size, max_step_size)
// (constant for cone_angle = 0). A step [t, t + dt] (cut at the far end) is
// looked up at its midpoint in the finest cascade that holds the midpoint:
// occupied, it becomes a sample and the march moves to t + dt; empty, the
// march jumps to where the ray leaves that cell. At most max_samples samples
// per ray. The march is the same function for counting (first pass) and for
// writing the samples at the ray's offset (second pass), so both passes agree.
//
// This header is the op's one description shared by every backend: the march
// (written once for the CPU kernels, CUDA, the Metal shaders and the MSL
// shim), the ops' declaration (their attribute lists, MO_RAY_MARCH_ATTRS and
// MO_RAY_MARCH_STATIC_ATTRS) and, in host code, the attributes and checks that
// follow from it, the Metal plans' signatures, the CUDA launchers' and, for
// the TensorFlow kernels (MO_TF_KERNEL), the kernel classes. The op's files
// (docs/ADDING_AN_OP.md):
//   ray_march_op.cc    REGISTER_OP (both ops)        ray_march_cpu.cc    CPU kernels, XLA host handler
//   ray_march.cu.cc    CUDA kernels, launchers       ray_march_cuda.cc   TF GPU kernel, XLA CUDA handler
//   ray_march.metal    Metal shaders                 ray_march_metal.cc  Metal plans, tensorflow-metal glue
//   ray_march_xla.cc   XLA op kernel (RayMarchStatic)
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host). Sizes
// fit in 32 bits: the host checks R, C G^3 and the sample count against
// 2^31 - 1 (the checks below).
struct RayMarchParams {
  float aabb_min[3];  // cascade 0's box
  float aabb_max[3];
  float step_size;      // > 0
  float cone_angle;     // >= 0
  float max_step_size;  // >= step_size
  int32 num_rays;       // R
  int32 grid_resolution;    // G
  int32 cascades;           // C
  int32 bytes_per_cascade;  // ceil(G^3 / 8)
  int32 max_samples;        // per ray, >= 1
  int32 max_iterations;     // bound on steps + skips of one ray
  int32 jitter;             // 0 or 1; the seed is an input (rm_march_ray's `seed`)
};

// One call's inputs: the CPU and CUDA kernels fill them on the host, the
// Metal shaders from their buffers (the seed read from its own).
struct RayMarchInputs {
  const MO_DEVICE float* origins;
  const MO_DEVICE float* directions;
  const MO_DEVICE float* near;
  const MO_DEVICE float* far;
  const MO_DEVICE unsigned char* occupancy;
  uint32 seed;
};

// Where the second pass writes the samples; all null in the first (counting).
struct RayMarchSamples {
  MO_DEVICE float* t_starts;
  MO_DEVICE float* t_ends;
  MO_DEVICE int32* ray_indices;
};

// The Metal buffer indices of the two marching shaders (declared by
// ray_march.metal, bound by the plans of ray_march_metal.cc): the op's inputs
// in op order, then each pass's own.
enum RayMarchBuffer {
  kRmOrigins,
  kRmDirections,
  kRmNear,
  kRmFar,
  kRmOccupancy,
  kRmSeed,
  kRmCountCounts,  // ray_march_count
  kRmCountParams,
  kRmFillOffsets = kRmCountCounts,  // ray_march_fill
  kRmFillTStarts,
  kRmFillTEnds,
  kRmFillRayIndices,
  kRmFillParams
};

// The bound on one ray's loop: every sample is one iteration, and a ray
// crosses at most 3 G cells of each cascade (one skip each); the margin
// covers cells re-entered through rounding.
MO_FN int32 rm_max_iterations(int32 max_samples, int32 grid_resolution, int32 cascades) {
  const int64 n = int64(max_samples) + 4 * int64(grid_resolution) * cascades + 16;
  return n > 2147483647 ? 2147483647 : int32(n);
}

// Bytes of one cascade's bitfield.
MO_FN int32 rm_bytes_per_cascade(int32 grid_resolution) {
  const int64 cells = int64(grid_resolution) * grid_resolution * grid_resolution;
  return int32((cells + 7) >> 3);
}

// A uniform number in [0, 1) from (seed, ray): murmur3's 32-bit finaliser.
MO_FN float rm_jitter(uint32 seed, uint32 ray) {
  uint32 h = seed * 0x9E3779B1u + ray;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return float(h >> 8) * (1.0f / 16777216.0f);
}

MO_FN float rm_step(float t, MO_CONSTANT RayMarchParams& p) {
  return fmin_f(fmax_f(t * p.cone_angle, p.step_size), p.max_step_size);
}

// Half extent and centre of cascade c's box along `axis`.
MO_FN float rm_half(int32 c, int32 axis, MO_CONSTANT RayMarchParams& p) {
  return 0.5f * (p.aabb_max[axis] - p.aabb_min[axis]) * float(1 << c);
}
MO_FN float rm_center(int32 axis, MO_CONSTANT RayMarchParams& p) {
  return 0.5f * (p.aabb_max[axis] + p.aabb_min[axis]);
}

// [t0, t1] of the ray inside the box centre +- extent; t0 > t1 when it misses.
// An axis the ray runs parallel to constrains nothing if the origin is inside
// that slab and excludes the ray otherwise.
MO_FN void rm_box_interval(const MO_THREAD float* o, const MO_THREAD float* d, int32 c,
                           MO_CONSTANT RayMarchParams& p, MO_THREAD float& t0, MO_THREAD float& t1) {
  t0 = -INFINITY;
  t1 = INFINITY;
  for (int32 a = 0; a < 3; ++a) {
    const float lo = rm_center(a, p) - rm_half(c, a, p);
    const float hi = rm_center(a, p) + rm_half(c, a, p);
    if (d[a] == 0.0f) {
      if (!(o[a] >= lo && o[a] <= hi)) {
        t0 = INFINITY;
        t1 = -INFINITY;
      }
      continue;
    }
    const float inv = 1.0f / d[a];
    const float ta = (lo - o[a]) * inv;
    const float tb = (hi - o[a]) * inv;
    t0 = fmax_f(t0, fmin_f(ta, tb));
    t1 = fmin_f(t1, fmax_f(ta, tb));
  }
}

// The finest cascade whose box holds x, or C when none does.
MO_FN int32 rm_cascade_of(const MO_THREAD float* x, MO_CONSTANT RayMarchParams& p) {
  for (int32 c = 0; c < p.cascades; ++c) {
    bool inside = true;
    for (int32 a = 0; a < 3; ++a) inside = inside && fabs_f(x[a] - rm_center(a, p)) <= rm_half(c, a, p);
    if (inside) return c;
  }
  return p.cascades;
}

// Cell coordinate of x along `axis` in cascade c, clamped to [0, G).
MO_FN int32 rm_cell(float x, int32 c, int32 axis, MO_CONSTANT RayMarchParams& p) {
  const float extent = rm_half(c, axis, p);
  const float u = (x - (rm_center(axis, p) - extent)) / (2.0f * extent) * float(p.grid_resolution);
  const float f = fmin_f(fmax_f(floor_f(u), 0.0f), float(p.grid_resolution - 1));
  return int32(f);
}

MO_FN bool rm_occupied(const MO_DEVICE unsigned char* bits, int32 c, const MO_THREAD int32* cell,
                       MO_CONSTANT RayMarchParams& p) {
  const int32 g = p.grid_resolution;
  const int32 index = cell[0] + g * (cell[1] + g * cell[2]);
  const unsigned char byte = bits[c * p.bytes_per_cascade + (index >> 3)];
  return ((byte >> (index & 7)) & 1) != 0;
}

// Where the ray leaves cell `cell` of cascade c (the nearest of the three
// boundary planes ahead of it).
MO_FN float rm_cell_exit(const MO_THREAD float* o, const MO_THREAD float* d, int32 c, const MO_THREAD int32* cell,
                         MO_CONSTANT RayMarchParams& p) {
  float t_exit = INFINITY;
  for (int32 a = 0; a < 3; ++a) {
    if (d[a] == 0.0f) continue;
    const float extent = rm_half(c, a, p);
    const float size = 2.0f * extent / float(p.grid_resolution);
    const float edge = (rm_center(a, p) - extent) + size * float(cell[a] + (d[a] > 0.0f ? 1 : 0));
    t_exit = fmin_f(t_exit, (edge - o[a]) / d[a]);
  }
  return t_exit;
}

// Marches ray `ray` and returns its number of samples. With out.t_starts
// non-null, writes them (and t_ends, ray_indices) from index `offset` on.
// in.seed is the op's seed input (used with p.jitter).
MO_FN int32 rm_march_ray(MO_THREAD const RayMarchInputs& in, int32 ray, MO_CONSTANT RayMarchParams& p, int32 offset,
                         MO_THREAD const RayMarchSamples& out) {
  const MO_DEVICE float* origins = in.origins;
  const MO_DEVICE float* directions = in.directions;
  const MO_DEVICE float* near = in.near;
  const MO_DEVICE float* far = in.far;
  const MO_DEVICE unsigned char* bits = in.occupancy;
  const uint32 seed = in.seed;
  MO_DEVICE float* t_starts = out.t_starts;
  MO_DEVICE float* t_ends = out.t_ends;
  MO_DEVICE int32* ray_indices = out.ray_indices;
  float o[3], d[3];
  for (int32 a = 0; a < 3; ++a) {
    o[a] = origins[3 * ray + a];
    d[a] = directions[3 * ray + a];
  }
  float t_box0, t_box1;
  rm_box_interval(o, d, p.cascades - 1, p, t_box0, t_box1);
  // NaN and infinite bounds give no samples (fmax/fmin would drop a NaN).
  if (isnan_f(near[ray]) || isnan_f(far[ray])) return 0;
  float t = fmax_f(near[ray], t_box0);
  const float t_far = fmin_f(far[ray], t_box1);
  if (!(t < t_far) || isinf_f(t) || isinf_f(t_far)) return 0;
  if (p.jitter != 0) t += rm_jitter(seed, uint32(ray)) * rm_step(t, p);
  int32 count = 0;
  for (int32 it = 0; it < p.max_iterations && count < p.max_samples && t < t_far; ++it) {
    const float t_end = fmin_f(t + rm_step(t, p), t_far);
    const float t_mid = 0.5f * (t + t_end);
    float x[3];
    for (int32 a = 0; a < 3; ++a) x[a] = o[a] + t_mid * d[a];
    const int32 c = rm_cascade_of(x, p);
    if (c == p.cascades) break;
    int32 cell[3];
    for (int32 a = 0; a < 3; ++a) cell[a] = rm_cell(x[a], c, a, p);
    float t_next;
    if (rm_occupied(bits, c, cell, p)) {
      if (t_starts) {
        t_starts[offset + count] = t;
        t_ends[offset + count] = t_end;
        ray_indices[offset + count] = ray;
      }
      ++count;
      t_next = t_end;
    } else {
      t_next = fmax_f(rm_cell_exit(o, d, c, cell, p), t_mid);
    }
    if (!(t_next > t)) break;  // no progress at this magnitude of t
    t = t_next;
  }
  return count;
}

// MetalOpsRayMarchStatic's outputs: samples [sample_budget], layout [R],
// and the two counts (scalars).
struct RayMarchStaticOutputs {
  MO_DEVICE float* t_starts;
  MO_DEVICE float* t_ends;
  MO_DEVICE int32* ray_indices;
  MO_DEVICE int32* ray_offsets;
  MO_DEVICE int32* ray_counts;
  MO_DEVICE int32* num_samples;
  MO_DEVICE int32* num_rays;
};

// RayMarchStatic's padding: samples [num_samples, sample_budget) are
// [0, 0] intervals of the last ray (0 without rays), so that the ray indices
// stay sorted and index a ray wherever there is one.
MO_FN int32 rm_static_pad_ray(int32 num_rays) { return num_rays > 0 ? num_rays - 1 : 0; }

// The prefix sum of the per-ray counts without threads that wait on each
// other (the Metal kernels): `chunks` threads each sum `chunk` consecutive
// counts, one thread scans those sums, and each thread then writes its
// chunk's offsets. Sums are 64-bit so a total above 2^31 is seen, not wrapped.
struct RayMarchScanParams {
  int32 num_rays;
  int32 chunk;   // counts per thread
  int32 chunks;  // threads: ceil(num_rays / chunk)
};

// The Metal buffer indices of the three prefix-sum shaders (declared by
// ray_march.metal, bound by the count plan of ray_march_metal.cc).
enum RayMarchScanBuffer {
  kRmChunkSumsCounts = 0,  // ray_march_chunk_sums
  kRmChunkSumsSums,
  kRmChunkSumsParams,
  kRmScanSums = 0,  // ray_march_scan_chunk_sums
  kRmScanTotal,
  kRmScanParams,
  kRmOffsetsCounts = 0,  // ray_march_offsets
  kRmOffsetsSums,
  kRmOffsetsOut,
  kRmOffsetsParams
};

// At most `threads` chunks (host side).
MO_FN RayMarchScanParams rm_scan_params(int32 num_rays, int32 threads) {
  RayMarchScanParams s;
  s.num_rays = num_rays;
  s.chunk = num_rays > 0 ? (num_rays + threads - 1) / threads : 1;
  s.chunks = (num_rays + s.chunk - 1) / s.chunk;
  return s;
}

MO_FN uint64 rm_chunk_sum(const MO_DEVICE int32* counts, int32 i, MO_CONSTANT RayMarchScanParams& s) {
  uint64 sum = 0;
  const int32 begin = i * s.chunk;
  const int32 end = begin + s.chunk < s.num_rays ? begin + s.chunk : s.num_rays;
  for (int32 r = begin; r < end; ++r) sum += uint64(counts[r]);
  return sum;
}

// Exclusive scan of the chunk sums in place; returns the total.
MO_FN uint64 rm_scan_chunk_sums(MO_DEVICE uint64* sums, MO_CONSTANT RayMarchScanParams& s) {
  uint64 running = 0;
  for (int32 i = 0; i < s.chunks; ++i) {
    const uint64 v = sums[i];
    sums[i] = running;
    running += v;
  }
  return running;
}

// Offsets of chunk i's rays from its scanned sum, clamped to 2^31 - 1 (the
// host refuses a total above that before anything reads them).
MO_FN void rm_chunk_offsets(const MO_DEVICE int32* counts, uint64 base, int32 i, MO_DEVICE int32* offsets,
                            MO_CONSTANT RayMarchScanParams& s) {
  const int32 begin = i * s.chunk;
  const int32 end = begin + s.chunk < s.num_rays ? begin + s.chunk : s.num_rays;
  uint64 running = base;
  for (int32 r = begin; r < end; ++r) {
    offsets[r] = running < uint64(2147483647) ? int32(running) : 2147483647;
    running += uint64(counts[r]);
  }
}

}  // namespace mo

// ---- The ops' declaration (kernels/spec/op_attrs.h) ------------------------------------
// MetalOpsRayMarch(origins, directions, near, far, occupancy, seed) -> t_starts,
// t_ends, ray_indices, ray_offsets, ray_counts; MetalOpsRayMarchStatic, the
// same into outputs of sample_budget samples (ray_march_op.cc). The kinds say
// how TensorFlow holds each attribute; their values are checked together by
// CheckAttrs below (one message each, naming the attribute), which the CUDA
// harness, the MSL shim runner and the NEON driver run too.
#define MO_RAY_MARCH_ATTRS(ATTR)                                          \
  ATTR(aabb, FloatList<6>, "[min_x, min_y, min_z, max_x, max_y, max_z]") \
  ATTR(grid_resolution, RequiredInt, INT32_MIN, INT32_MAX)               \
  ATTR(step_size, RequiredAnyFloat, 0.0)                                 \
  ATTR(cone_angle, AnyFloat, 0.0)                                        \
  ATTR(max_step_size, AnyFloat, 1e10)                                    \
  ATTR(max_samples, Int, 1024, INT32_MIN, INT32_MAX)                     \
  ATTR(jitter, Bool, false)
#define MO_RAY_MARCH_STATIC_ATTRS(ATTR) ATTR(sample_budget, RequiredInt, 0, 2147483647)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cmath>  // host
#include <cstdint>  // host

#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace ray_march {

// Every index the kernels compute is a 32-bit int (the Metal shaders avoid
// 64-bit arithmetic): rays, cells and samples stay below this.
constexpr int64_t kMaxIndex = 2147483647;
constexpr int kMaxCascades = 16;
constexpr int kMaxGridResolution = 1024;

// The declarations' Attrs, ReadAttrs and VisitAttrs: RayMarch's attributes,
// and RayMarchStatic's own (its budget, "RayMarchStatic: 'sample_budget' must
// be in [0, 2147483647], got -1").
namespace declared {
MO_DECLARE_ATTRS("RayMarch", MO_RAY_MARCH_ATTRS);
}  // namespace declared
namespace declared_static {
MO_DECLARE_ATTRS("RayMarchStatic", MO_RAY_MARCH_STATIC_ATTRS);
}  // namespace declared_static

inline bool Finite(float x) { return std::isfinite(x); }

// The attributes' values.
inline Result CheckAttrs(const declared::Attrs& a) {
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

// RayMarch's attributes (the members of MO_RAY_MARCH_ATTRS: a.aabb,
// a.grid_resolution, ...), read and checked (CheckAttrs): the one attribute
// read of the shape functions, the kernel classes, the Metal kernel and XLA.
struct Attrs : declared::Attrs {};

template <typename Get>
Result ReadAttrs(Get&& get, Attrs* a) {
  MO_RETURN_IF_INVALID(declared::ReadAttrs(get, a));
  return CheckAttrs(*a);
}

template <typename F>
void VisitAttrs(const Attrs& a, F&& f) {
  declared::VisitAttrs(a, f);
}

// RayMarchStatic's: RayMarch's, then sample_budget, the static size of the
// sample outputs.
MO_EXTEND_ATTRS(StaticAttrs, Attrs, declared_static);

// The attributes from plain values, checked (the CUDA harness, the MSL shim
// runner and the NEON driver, which have no TensorFlow to read them from).
inline Result AttrsFromValues(const float* aabb, int grid_resolution, float step_size, float cone_angle,
                              float max_step_size, int max_samples, bool jitter, Attrs* a) {
  for (size_t i = 0; i < a->aabb.size(); ++i) a->aabb[i] = aabb[i];
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

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (ray_march_metal.cc; shaders ray_march.metal, buffer
// indices above), two because the number of samples decides the outputs'
// shapes:
//   RayMarchCount: each ray's sample count (one thread per ray), then their
//     prefix sum (RayMarchScanParams: chunk sums, one thread scanning them and
//     writing the total, the chunks' offsets);
//   the caller reads the total once that plan has completed, allocates the
//     samples, then
//   RayMarchFill: each ray's samples from its offset on (one thread per ray).
// Every Metal path runs them (kernels/metal_plan/plan.h); none holds a queue
// while it waits for the count.
namespace mo::metal_plan {

// The op's six inputs (the seed: one int32 the shaders read), at the same
// slots in both plans; each plan's own follow.
enum RayMarchInputSlots {
  kRmSlotOrigins,
  kRmSlotDirections,
  kRmSlotNear,
  kRmSlotFar,
  kRmSlotOccupancy,
  kRmSlotSeed,
  kRmInputSlots
};
enum RayMarchCountSlots {
  kRmSlotCounts = kRmInputSlots,  // int32 [R]
  kRmSlotOffsets,                 // int32 [R]
  kRmSlotTotal,                   // one uint64: the number of samples
  kRmCountSlots
};
enum RayMarchFillSlots {
  kRmFillSlotOffsets = kRmInputSlots,
  kRmFillSlotTStarts,     // float [total]
  kRmFillSlotTEnds,       // float [total]
  kRmFillSlotRayIndices,  // int32 [total]
  kRmFillSlots
};

// Threads of the prefix sum's chunked passes (RayMarchScanParams).
constexpr int32_t kRmScanThreads = 1024;

// p.num_rays > 0.
Plan RayMarchCount(const RayMarchParams& p);
// p.num_rays > 0 and a total > 0.
Plan RayMarchFill(const RayMarchParams& p);

}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>  // host

#include <cstddef>  // host

// The CUDA launchers (ray_march.cu.cc), plain C++ (no TensorFlow): the TF GPU
// kernel and XLA's CUDA handler (ray_march_cuda.cc) and the C-ABI harness
// (tests/cuda/ray_march_harness.cu.cc).
namespace mo::cuda {

// Bytes of device scratch LaunchRayMarchCount needs for p.num_rays rays.
size_t RayMarchCountScratchBytes(int32_t rays);

// Pass 1: counts[r] = ray r's sample count, offsets[r] = their exclusive
// prefix sum (clamped to 2^31 - 1), *total (device) = the sum, in 64 bits.
cudaError_t LaunchRayMarchCount(const RayMarchParams& p, const RayMarchInputs& in, int32_t* counts,
                                int32_t* offsets, long long* total, void* scratch, size_t scratch_bytes,
                                cudaStream_t stream);

// Pass 2: ray r's samples from offsets[r] on.
cudaError_t LaunchRayMarchFill(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* offsets,
                               float* t_starts, float* t_ends, int32_t* ray_indices, cudaStream_t stream);

// RayMarchStatic on the device, no read-back: pass 1 and the prefix sum of
// LaunchRayMarchCount, then the rays kept in order while their samples fit
// in sample_budget (each with all its samples; the others count 0, offset
// num_samples), pass 2 for the kept rays, and samples [num_samples,
// sample_budget) padded (rm_static_pad_ray), as the CPU functor
// (ray_march_cpu.cc). `seed`: the op's seed in device memory, read by the
// kernels in place of in.seed; nullptr to use in.seed. Scratch:
// RayMarchCountScratchBytes(p.num_rays).
cudaError_t LaunchRayMarchStatic(const RayMarchParams& p, const RayMarchInputs& in, const int32_t* seed,
                                 int64_t sample_budget, const RayMarchStaticOutputs& out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream);

}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels of MetalOpsRayMarch and MetalOpsRayMarchStatic, once
// for every C++-API device (one kernel class templated on the device, a
// functor per device): the attributes and checks above and the output
// allocation between the two passes here; RayMarchFunctor<Device> does the
// work: ray_march_cpu.cc (CPU; registers both ops) and ray_march_cuda.cc
// (CUDA; registers RayMarchOp), each of which includes TensorFlow's headers
// and kernels/framework/op_kernel_with_attrs.h first and defines MO_TF_KERNEL
// before the include (this header itself reaches no TensorFlow header). The
// number of samples decides RayMarch's outputs' shapes, so the first pass's
// total reaches the host before they are allocated; RayMarchStaticOp (CPU
// only) has outputs sized to the sample_budget attribute instead:
// RayMarchFunctor<Device>::Static.
namespace mo {

// Defined per device, Count and Fill for R > 0.
template <typename Device>
struct RayMarchFunctor {
  // Pass 1: each ray's sample count into counts [R], their exclusive prefix
  // sum into offsets [R] (when the total fits: ray_march::TotalSamples),
  // and the total into *total on the host.
  static absl::Status Count(::tensorflow::OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                            int32_t* offsets, int32_t* counts, int64_t* total);
  // Pass 2: the samples of ray r from offsets[r] on (`total` of them in all, > 0).
  static absl::Status Fill(::tensorflow::OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                           const int32_t* offsets, int64_t total, float* t_starts, float* t_ends,
                           int32_t* ray_indices);
  // MetalOpsRayMarchStatic (any R): rays in order while their samples fit in
  // sample_budget, each with all its samples; the others none (count 0,
  // offset num_samples); the samples past num_samples padded
  // (rm_static_pad_ray). The kept samples are RayMarch's first num_samples.
  static absl::Status Static(::tensorflow::OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                             int64_t sample_budget, const RayMarchStaticOutputs& out);
};

// The inputs of both ops (checked by ray_march::Shapes).
inline RayMarchInputs RayMarchInputsOf(::tensorflow::OpKernelContext* ctx) {
  return {ctx->input(0).flat<float>().data(), ctx->input(1).flat<float>().data(), ctx->input(2).flat<float>().data(),
          ctx->input(3).flat<float>().data(), ctx->input(4).flat<uint8_t>().data(),
          // a host-memory input on every device (see the registrations)
          static_cast<uint32_t>(ctx->input(5).scalar<int32_t>()())};
}

inline absl::Status CheckRayMarchShapes(::tensorflow::OpKernelContext* ctx, const ray_march::Attrs& attrs) {
  using checks::DimsOf;
  return checks::ToStatus(ray_march::Shapes(DimsOf(ctx->input(0)), DimsOf(ctx->input(1)), DimsOf(ctx->input(2)),
                                            DimsOf(ctx->input(3)), DimsOf(ctx->input(4)), DimsOf(ctx->input(5)),
                                            attrs));
}

template <typename Device>
class RayMarchOp : public OpKernelWithAttrs<ray_march::Attrs> {
 public:
  using OpKernelWithAttrs<ray_march::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckRayMarchShapes(ctx, attrs_));
    const int64_t rays = ctx->input(0).dim_size(0);
    const RayMarchParams p = ray_march::MakeParams(attrs_, rays, ctx->input(4).dim_size(0));
    ::tensorflow::Tensor *offsets = nullptr, *counts = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, ::tensorflow::TensorShape({rays}), &offsets));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, ::tensorflow::TensorShape({rays}), &counts));
    const RayMarchInputs in = RayMarchInputsOf(ctx);
    int64_t total = 0;
    if (rays > 0) {
      OP_REQUIRES_OK(ctx, RayMarchFunctor<Device>::Count(ctx, p, in, offsets->flat<int32_t>().data(),
                                                         counts->flat<int32_t>().data(), &total));
    }
    OP_REQUIRES_OK(ctx, checks::ToStatus(ray_march::TotalSamples(total)));
    ::tensorflow::Tensor *t_starts = nullptr, *t_ends = nullptr, *ray_indices = nullptr;
    const ::tensorflow::TensorShape samples({total});
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, samples, &t_starts));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, samples, &t_ends));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, samples, &ray_indices));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, RayMarchFunctor<Device>::Fill(ctx, p, in, offsets->flat<int32_t>().data(), total,
                                                      t_starts->flat<float>().data(), t_ends->flat<float>().data(),
                                                      ray_indices->flat<int32_t>().data()));
  }
};

template <typename Device>
class RayMarchStaticOp : public OpKernelWithAttrs<ray_march::StaticAttrs> {
 public:
  using OpKernelWithAttrs<ray_march::StaticAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    OP_REQUIRES_OK(ctx, CheckRayMarchShapes(ctx, attrs_));
    const int64_t rays = ctx->input(0).dim_size(0), budget = attrs_.sample_budget;
    const TensorShape shapes[7] = {TensorShape({budget}), TensorShape({budget}), TensorShape({budget}),
                                   TensorShape({rays}),   TensorShape({rays}),   TensorShape({}),
                                   TensorShape({})};
    ::tensorflow::Tensor* t[7];
    for (int i = 0; i < 7; ++i) OP_REQUIRES_OK(ctx, ctx->allocate_output(i, shapes[i], &t[i]));
    const RayMarchStaticOutputs out = {t[0]->flat<float>().data(),   t[1]->flat<float>().data(),
                                       t[2]->flat<int32_t>().data(), t[3]->flat<int32_t>().data(),
                                       t[4]->flat<int32_t>().data(), t[5]->flat<int32_t>().data(),
                                       t[6]->flat<int32_t>().data()};
    OP_REQUIRES_OK(ctx, RayMarchFunctor<Device>::Static(ctx, ray_march::MakeParams(attrs_, rays,
                                                                                   ctx->input(4).dim_size(0)),
                                                        RayMarchInputsOf(ctx), budget, out));
  }
};

}  // namespace mo

#if MO_XLA
// What RayMarchStatic's XLA handlers (host: ray_march_cpu.cc, CUDA:
// ray_march_cuda.cc, each of which includes kernels/xla/xla_ffi.h first)
// share: the buffers' shapes checked, the kernels' inputs (with `seed`; the
// CUDA kernels read it from the seed's device buffer instead) and outputs.
namespace mo::xla_ffi {

inline ffi::Error RayMarchStaticShapes(const ffi::AnyBuffer& origins, const ffi::AnyBuffer& directions,
                                       const ffi::AnyBuffer& near, const ffi::AnyBuffer& far,
                                       const ffi::AnyBuffer& occupancy, const ffi::AnyBuffer& seed,
                                       const ray_march::Attrs& a) {
  return ToError(ray_march::Shapes(DimsOf(origins), DimsOf(directions), DimsOf(near), DimsOf(far),
                                   DimsOf(occupancy), DimsOf(seed), a));
}

inline RayMarchInputs RayMarchInputsOf(const ffi::AnyBuffer& origins, const ffi::AnyBuffer& directions,
                                       const ffi::AnyBuffer& near, const ffi::AnyBuffer& far,
                                       const ffi::AnyBuffer& occupancy, uint32_t seed) {
  return {Data<float>(origins), Data<float>(directions), Data<float>(near), Data<float>(far),
          Data<uint8_t>(occupancy), seed};
}

inline RayMarchStaticOutputs RayMarchStaticOutputsOf(RetBuffer t_starts, RetBuffer t_ends, RetBuffer ray_indices,
                                                     RetBuffer ray_offsets, RetBuffer ray_counts,
                                                     RetBuffer num_samples, RetBuffer num_rays) {
  return {Data<float>(t_starts),    Data<float>(t_ends),       Data<int32_t>(ray_indices), Data<int32_t>(ray_offsets),
          Data<int32_t>(ray_counts), Data<int32_t>(num_samples), Data<int32_t>(num_rays)};
}

}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_H_
