// PackedVolumeRender's attributes and input checks, written once for every
// kernel of the op and its shape functions: the attributes, the background and
// the backward's per-ray inputs are VolumeRender's (kernels/volume_render/volume_render_spec.h);
// the shapes, the layout of the packed samples and the sample
// values are checked here with their messages. No TensorFlow API: sizes and
// values in, kernels/spec/checks.h's Result out. Messages name the argument; tests
// match on them.
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_SPEC_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_SPEC_H_

#include <cstdint>

#include "kernels/packed_volume_render/packed_volume_render.h"
#include "kernels/spec/checks.h"
#include "kernels/volume_render/volume_render_spec.h"

namespace mo {
namespace packed_volume_render {

constexpr const char kForward[] = "MetalOpsPackedVolumeRender";
constexpr const char kBackward[] = "MetalOpsPackedVolumeRenderGrad";

// Offsets and counts are int32 (as RayMarch returns them): N stays below this.
constexpr int64_t kMaxSamples = 2147483647;

// The attributes are VolumeRender's, read and checked by its ReadAttrs(get,
// op, forward, &attrs) (found through the type) with this op's names.
using volume_render::Attrs;
using volume_render::RayShapes;

// sigma [N], rgb [N, 3], t_starts [N], t_ends [N], ray_offsets [R],
// ray_counts [R], background [3] or [R, 3].
inline Result InputShapes(const char* op, const Dims& sigma, const Dims& rgb, const Dims& t_starts,
                          const Dims& t_ends, const Dims& offsets, const Dims& counts, const Dims& background,
                          RayShapes* shapes) {
  if (sigma.size() != 1) {
    return Invalid(op, ": 'sigma' must be [N] (rank 1, packed samples), got shape ", ShapeString(sigma));
  }
  const int64_t N = sigma[0];
  if (N > kMaxSamples) return Invalid(op, ": at most ", kMaxSamples, " samples (int32 offsets), got ", N);
  if (rgb != Dims{N, 3}) {
    return Invalid(op, ": 'rgb' must be [N, 3] = [", N, ", 3] to match 'sigma', got shape ", ShapeString(rgb));
  }
  if (t_starts != Dims{N}) {
    return Invalid(op, ": 't_starts' must be [N] = [", N, "] to match 'sigma', got shape ", ShapeString(t_starts));
  }
  if (t_ends != Dims{N}) {
    return Invalid(op, ": 't_ends' must be [N] = [", N, "] to match 'sigma', got shape ", ShapeString(t_ends));
  }
  if (offsets.size() != 1) {
    return Invalid(op, ": 'ray_offsets' must be [R] (rank 1), got shape ", ShapeString(offsets));
  }
  const int64_t R = offsets[0];
  if (counts != Dims{R}) {
    return Invalid(op, ": 'ray_counts' must be [R] = [", R, "] like 'ray_offsets', got shape ", ShapeString(counts));
  }
  if (R == 0 && N > 0) {
    return Invalid(op, ": 'ray_counts' sum to 0 (no rays) but 'sigma' has ", N, " samples");
  }
  bool per_ray = false;
  MO_RETURN_IF_INVALID(volume_render::Background(op, background, R, &per_ray));
  shapes->rays = R;
  shapes->samples = N;
  shapes->background_per_ray = per_ray;
  return Ok();
}

// The forward outputs and upstream gradients the backward receives
// (VolumeRender's checks): weights [N] when returned, else [0].
inline Result GradInputShapes(const char* op, const RayShapes& shapes, const Dims& out_rgb, const Dims& depth,
                              const Dims& opacity, const Dims& weights, const Dims& grad_rgb, const Dims& grad_depth,
                              const Dims& grad_opacity, const Dims& grad_weights, bool* has_weight_grad) {
  const int64_t N = shapes.samples;
  return volume_render::RenderGradShapes(op, shapes.rays, N, {N}, "[N]", {0}, "[0]", out_rgb, depth, opacity, weights,
                                         grad_rgb, grad_depth, grad_opacity, grad_weights, has_weight_grad);
}

// The error for ray r, which failed pvr_layout_code with `code`; prev_end
// is where ray r - 1 ends (ray_offsets[r-1] + ray_counts[r-1], 0 for r = 0).
inline Result BadLayout(const char* op, int32_t code, int64_t r, int64_t N, int64_t prev_end, int64_t offset,
                        int64_t count) {
  if (code == kPvrBadCount) return Invalid(op, ": 'ray_counts' must be >= 0: ray ", r, " has count ", count);
  if (code == kPvrBadOffset) {
    return Invalid(op, ": 'ray_offsets' must be the exclusive prefix sum of 'ray_counts' (samples packed in ray ",
                   "order, as ray_march returns them): ray ", r, " has offset ", offset, ", expected ", prev_end);
  }
  if (code == kPvrPastEnd) {
    return Invalid(op, ": ray ", r, "'s samples [", offset, ", ", offset + count, ") run past the ", N,
                   " samples of 'sigma' ('ray_offsets' / 'ray_counts' out of range)");
  }
  return Invalid(op, ": 'ray_counts' sum to ", offset + count, " but 'sigma' has ", N, " samples");
}

// The forward's error for sample `sample` (an index into all N samples) of
// ray r, which failed vr_check_samples with `code`.
inline Result BadSample(int32_t code, int64_t r, int64_t sample, double sigma, double t_start, double t_end) {
  if (code == kVrBadSigma) {
    return Invalid(kForward, ": 'sigma' must be non-negative (and not NaN): sample ", sample, " (ray ", r,
                   ") has sigma = ", sigma);
  }
  return Invalid(kForward, ": 't_ends' must be >= 't_starts' (and not NaN): sample ", sample, " (ray ", r,
                 ") has t_start = ", t_start, ", t_end = ", t_end);
}

// The error for a failed check of ray r from host copies of the whole
// offsets / counts arrays and the sample arrays.
template <typename T>
Result BadRay(const char* op, const VrCheck& check, int64_t r, int64_t N, const int32_t* offsets,
              const int32_t* counts, const T* sigma, const T* t_starts, const T* t_ends) {
  if (check.code == kVrBadSigma || check.code == kVrBadT) {
    const int64_t s = offsets[r] + check.sample;
    return BadSample(check.code, r, s, sigma[s], t_starts[s], t_ends[s]);
  }
  const int64_t prev_end = r > 0 ? int64_t{offsets[r - 1]} + counts[r - 1] : 0;
  return BadLayout(op, check.code, r, N, prev_end, offsets[r], counts[r]);
}

// The error a Metal validation pass found (kernels/packed_volume_render/packed_volume_render.h
// PvrCheckResult, read on the host after the command buffer completed), or OK:
// the same message as the CPU's BadRay.
inline Result BadCheck(const char* op, const PvrCheckResult& c, int64_t N) {
  if (c.code == kVrOk) return Ok();
  if (c.code == kVrBadSigma || c.code == kVrBadT) return BadSample(c.code, c.ray, c.sample, c.sigma, c.t_start, c.t_end);
  return BadLayout(op, c.code, c.ray, N, c.prev_end, c.offset, c.count);
}

}  // namespace packed_volume_render
}  // namespace mo

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_SPEC_H_
