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
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host). Sizes
// fit in 32 bits: the host checks R, C G^3 and the sample count against
// 2^31 - 1 (kernels/ray_march/ray_march_spec.h).
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
// kernels/ray_march/ray_march.metal, bound by kernels/ray_march/ray_march_plan.cc):
// the op's inputs in op order, then each pass's own.
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
// kernels/ray_march/ray_march.metal, bound by kernels/ray_march/ray_march_plan.cc).
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

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_H_
