// PackedVolumeRender: VolumeRender (kernels/volume_render/volume_render.h) over
// packed samples, as RayMarch returns them: N samples ordered by ray, sample i
// covering [t_starts[i], t_ends[i]], ray r owning the samples
// [ray_offsets[r], ray_offsets[r] + ray_counts[r]). The formulas, the
// early-termination rule and the backward are VolumeRender's
// (vr_forward_samples / vr_backward_samples); this header adds the layout
// rule and the per-ray drivers every backend runs (one ray per thread).
//
// Layout rule (checked per ray, so a ray that passes never reads outside
// [0, N)): ray_counts[r] >= 0, ray_offsets[0] = 0, ray_offsets[r] =
// ray_offsets[r-1] + ray_counts[r-1], and the last ray ends at N.
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_H_

#include "kernels/common/platform.h"
#include "kernels/volume_render/volume_render.h"

namespace mo {

// The Metal dispatches take VolumeRender's VolumeRenderParams (and
// vr_set_render_args), num_samples being N (write_weights: weights [N];
// has_weight_grad: weights and grad_weights are [N]).

// Layout check codes, after VolumeRender's kVrBadSigma / kVrBadT.
enum { kPvrBadCount = 3, kPvrBadOffset = 4, kPvrPastEnd = 5, kPvrShortTotal = 6 };

// The layout rule for ray r of R over N samples, whose offset and count are
// given and whose predecessor ends at prev_end (0 for r = 0): kVrOk or a
// kPvr* code.
MO_FN int32 pvr_layout_code(int64 r, int64 R, int64 N, int64 prev_end, int64 offset, int64 count) {
  if (count < 0) return kPvrBadCount;
  if (offset != prev_end || offset < 0) return kPvrBadOffset;
  if (offset + count > N) return kPvrPastEnd;
  if (r == R - 1 && offset + count != N) return kPvrShortTotal;
  return kVrOk;
}

// The same from the layout arrays.
MO_FN int32 pvr_check_layout(const MO_DEVICE int32* offsets, const MO_DEVICE int32* counts, int64 r, int64 R,
                             int64 N) {
  const int64 prev_end = r == 0 ? int64(0) : int64(offsets[r - 1]) + int64(counts[r - 1]);
  return pvr_layout_code(r, R, N, prev_end, int64(offsets[r]), int64(counts[r]));
}

// Ray r's checks, as the op reports them: the layout rule, then (with
// `samples`: the forward) its samples' values (vr_check_samples; check.sample
// is the index into the ray's samples).
template <typename T>
MO_FN VrCheck pvr_validate_ray(const MO_DEVICE int32* offsets, const MO_DEVICE int32* counts,
                               const MO_DEVICE T* sigma, const MO_DEVICE T* t_starts, const MO_DEVICE T* t_ends,
                               int64 r, int64 R, int64 N, bool samples) {
  VrCheck check;
  check.sample = 0;
  check.code = pvr_check_layout(offsets, counts, r, R, N);
  if (check.code != kVrOk || !samples) return check;
  const int64 o = int64(offsets[r]);
  return vr_check_samples(sigma + o, t_starts + o, t_ends + o, int64(counts[r]));
}

// The Metal validation passes (packed_volume_render_check_chunks, then
// packed_volume_render_check_first): `chunks` threads each find the first
// invalid ray of `chunk` consecutive rays, then one thread the first of those,
// and writes what the op's error message needs into a PvrCheckResult the host
// reads once the command buffer has completed.
struct PvrCheckParams {
  int64 rays;     // R
  int64 samples;  // N
  int32 chunk;    // rays per thread
  int32 chunks;   // threads: ceil(R / chunk)
  int32 check_samples;  // 1: the forward's value checks too
  int32 pad_;
};
struct PvrCheckResult {
  int64 ray;       // the first invalid ray
  int64 sample;    // value checks: the index into all N samples
  int64 prev_end;  // layout checks: where ray - 1 ends
  int64 offset;
  int64 count;
  int32 code;      // kVrOk or the failed check
  float sigma, t_start, t_end;  // value checks: that sample's values
};

#if !defined(__METAL_VERSION__)
// At most `threads` chunks (host side).
inline PvrCheckParams pvr_check_params(int64 R, int64 N, int32 threads, bool check_samples) {
  PvrCheckParams q;
  q.rays = R;
  q.samples = N;
  q.chunk = R > 0 ? int32((R + threads - 1) / threads) : 1;
  q.chunks = int32((R + q.chunk - 1) / q.chunk);
  q.check_samples = check_samples ? 1 : 0;
  q.pad_ = 0;
  return q;
}
#endif  // !__METAL_VERSION__

// The first invalid ray of chunk i, or R.
template <typename T>
MO_FN int64 pvr_check_chunk(const MO_DEVICE int32* offsets, const MO_DEVICE int32* counts, const MO_DEVICE T* sigma,
                            const MO_DEVICE T* t_starts, const MO_DEVICE T* t_ends, int32 i,
                            MO_CONSTANT PvrCheckParams& q) {
  const int64 begin = int64(i) * q.chunk;
  const int64 end = begin + q.chunk < q.rays ? begin + q.chunk : q.rays;
  for (int64 r = begin; r < end; ++r) {
    if (pvr_validate_ray(offsets, counts, sigma, t_starts, t_ends, r, q.rays, q.samples, q.check_samples != 0).code !=
        kVrOk) {
      return r;
    }
  }
  return q.rays;
}

// The result for the first chunk whose first invalid ray is below R (code kVrOk when none).
template <typename T>
MO_FN void pvr_check_first(const MO_DEVICE int32* offsets, const MO_DEVICE int32* counts, const MO_DEVICE T* sigma,
                           const MO_DEVICE T* t_starts, const MO_DEVICE T* t_ends, const MO_DEVICE int64* firsts,
                           MO_DEVICE PvrCheckResult* result, MO_CONSTANT PvrCheckParams& q) {
  result->code = kVrOk;
  result->ray = 0;
  result->sample = 0;
  result->prev_end = 0;
  result->offset = 0;
  result->count = 0;
  result->sigma = 0.0f;
  result->t_start = 0.0f;
  result->t_end = 0.0f;
  for (int32 i = 0; i < q.chunks; ++i) {
    const int64 r = firsts[i];
    if (r >= q.rays) continue;
    const VrCheck check =
        pvr_validate_ray(offsets, counts, sigma, t_starts, t_ends, r, q.rays, q.samples, q.check_samples != 0);
    result->code = check.code;
    result->ray = r;
    result->prev_end = r == 0 ? int64(0) : int64(offsets[r - 1]) + int64(counts[r - 1]);
    result->offset = int64(offsets[r]);
    result->count = int64(counts[r]);
    if (check.code == kVrBadSigma || check.code == kVrBadT) {
      const int64 s = int64(offsets[r]) + check.sample;
      result->sample = s;
      result->sigma = float(sigma[s]);
      result->t_start = float(t_starts[s]);
      result->t_end = float(t_ends[s]);
    }
    return;
  }
}

// The Metal buffer indices of the validation shaders.
enum PackedVolumeRenderCheckBuffer {
  kPvrCheckRayOffsets,
  kPvrCheckRayCounts,
  kPvrCheckSigma,
  kPvrCheckTStarts,
  kPvrCheckTEnds,
  kPvrCheckFirsts,  // int64 [chunks]: check_chunks writes, check_first reads
  kPvrCheckResult,  // PvrCheckResult: check_first writes
  kPvrCheckParams
};

// The Metal buffer indices of the PackedVolumeRender shaders: the inputs in
// op order, the outputs, the VolumeRenderParams (declared by
// kernels/packed_volume_render/packed_volume_render.metal, bound by
// packed_volume_render_metal.cc).
enum PackedVolumeRenderForwardBuffer {
  kPvrForwardSigma,
  kPvrForwardRgb,
  kPvrForwardTStarts,
  kPvrForwardTEnds,
  kPvrForwardRayOffsets,
  kPvrForwardRayCounts,
  kPvrForwardBackground,
  kPvrForwardOutRgb,
  kPvrForwardDepth,
  kPvrForwardOpacity,
  kPvrForwardWeights,
  kPvrForwardParams
};
enum PackedVolumeRenderBackwardBuffer {
  kPvrBackwardSigma,
  kPvrBackwardRgb,
  kPvrBackwardTStarts,
  kPvrBackwardTEnds,
  kPvrBackwardRayOffsets,
  kPvrBackwardRayCounts,
  kPvrBackwardBackground,
  kPvrBackwardOutRgb,
  kPvrBackwardDepth,
  kPvrBackwardOpacity,
  kPvrBackwardWeights,
  kPvrBackwardGradRgb,
  kPvrBackwardGradDepth,
  kPvrBackwardGradOpacity,
  kPvrBackwardGradWeights,
  kPvrBackwardGradSigma,
  kPvrBackwardGradSamplesRgb,
  kPvrBackwardGradBackground,
  kPvrBackwardParams
};

// Forward for ray r: its layout, then vr_forward_samples over its samples
// (weights [N] written when a.weights is set). Returns the check; code !=
// kVrOk leaves NaN ray outputs (and NaN weights for a ray with a valid layout
// but invalid samples). check.sample is the index into the ray's samples.
template <typename T, typename M>
MO_FN VrCheck pvr_forward_ray(MO_THREAD const PackedVolumeRenderForwardArgs<T>& a, int64 r) {
  const bool write_weights = a.weights != nullptr;
  VrCheck check;
  check.sample = 0;
  check.code = pvr_check_layout(a.offsets, a.counts, r, a.rays, a.samples);
  if (check.code != kVrOk) {
    vr_write_invalid(a.out_rgb + r * 3, a.depth + r, a.opacity + r, a.weights, 0, false);
    return check;
  }
  const int64 o = a.offsets[r];
  return vr_forward_samples<T, M>(a.sigma + o, a.rgb + o * 3, a.t_starts + o, a.t_ends + o,
                                  a.background + (a.background_per_ray ? r * 3 : 0), int64(a.counts[r]),
                                  T(a.early_termination), a.out_rgb + r * 3, a.depth + r, a.opacity + r,
                                  write_weights ? a.weights + o : a.weights, write_weights);
}

// Backward for ray r (vr_backward_samples over its samples; the weights are
// differentiated when a.weights and a.grad_weights are set). Returns the
// layout check; a ray with an invalid layout writes NaN to its
// grad_background row and no sample gradient.
template <typename T, typename M>
MO_FN int32 pvr_backward_ray(MO_THREAD const PackedVolumeRenderBackwardArgs<T>& a, int64 r) {
  const bool has_weight_grad = a.weights != nullptr && a.grad_weights != nullptr;
  const int32 code = pvr_check_layout(a.offsets, a.counts, r, a.rays, a.samples);
  if (code != kVrOk) {
    const T nan = T(NAN);
    a.grad_background[r * 3 + 0] = nan;
    a.grad_background[r * 3 + 1] = nan;
    a.grad_background[r * 3 + 2] = nan;
    return code;
  }
  const int64 o = a.offsets[r];
  vr_backward_samples<T, M>(a.sigma + o, a.rgb + o * 3, a.t_starts + o, a.t_ends + o,
                            a.background + (a.background_per_ray ? r * 3 : 0), int64(a.counts[r]),
                            T(a.early_termination), a.out_rgb + r * 3, a.depth[r], a.opacity[r],
                            has_weight_grad ? a.weights + o : a.weights, a.grad_rgb + r * 3, a.grad_depth[r],
                            a.grad_opacity[r], has_weight_grad ? a.grad_weights + o : a.grad_weights,
                            has_weight_grad, a.grad_sigma + o, a.grad_samples_rgb + o * 3, a.grad_background + r * 3);
  return code;
}

}  // namespace mo

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_H_
