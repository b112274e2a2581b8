// PackedVolumeRender: VolumeRender (kernels/common/volume_render_math.h) over
// packed samples, as RayMarch returns them: N samples ordered by ray, sample i
// covering [t_starts[i], t_ends[i]], ray r owning the samples
// [ray_offsets[r], ray_offsets[r] + ray_counts[r]). The formulas, the
// early-termination rule and the backward are VolumeRender's
// (vr_forward_samples / vr_backward_samples); this header adds the layout
// rule and the per-ray drivers every backend runs (one ray per thread) and, in
// host code, the op's declaration, checks, plans, launchers and kernel classes.
//
// Layout rule (checked per ray, so a ray that passes never reads outside
// [0, N)): ray_counts[r] >= 0, ray_offsets[0] = 0, ray_offsets[r] =
// ray_offsets[r-1] + ray_counts[r-1], and the last ray ends at N.
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_H_

#include "kernels/common/platform.h"
#include "kernels/common/volume_render_math.h"

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

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsPackedVolumeRender takes early_termination, validate and
// return_weights, MetalOpsPackedVolumeRenderGrad the first two (the
// renderers' lists, kernels/common/volume_render_math.h).
#define MO_PACKED_VOLUME_RENDER_ATTRS(ATTR) MO_RENDER_ATTRS(ATTR)
#define MO_PACKED_VOLUME_RENDER_GRAD_ATTRS(ATTR) MO_RENDER_GRAD_ATTRS(ATTR)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cstdint>

#include "kernels/spec/checks.h"  // host
#include "kernels/spec/op_attrs.h"  // host

// The checks of the op's inputs, written once for every kernel of the op and
// its shape functions: the background and the backward's per-ray inputs are
// the renderers' (kernels/common/volume_render_math.h); the shapes, the
// layout of the packed samples and the sample values are checked here with
// their messages. No TensorFlow API: sizes and values in,
// kernels/spec/checks.h's Result out. Messages name the argument; tests match
// on them.
namespace mo {
namespace packed_volume_render {

constexpr const char kForward[] = "MetalOpsPackedVolumeRender";
constexpr const char kBackward[] = "MetalOpsPackedVolumeRenderGrad";

// Offsets and counts are int32 (as RayMarch returns them): N stays below this.
constexpr int64_t kMaxSamples = 2147483647;

// Attrs, ReadAttrs, VisitAttrs of the forward; GradAttrs of the backward.
MO_DECLARE_ATTRS(kForward, MO_PACKED_VOLUME_RENDER_ATTRS);
namespace grad {
MO_DECLARE_ATTRS(kBackward, MO_PACKED_VOLUME_RENDER_GRAD_ATTRS);
}  // namespace grad
using GradAttrs = grad::Attrs;

using render::RayShapes;

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
  MO_RETURN_IF_INVALID(render::Background(op, background, R, &per_ray));
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
  return render::RenderGradShapes(op, shapes.rays, N, {N}, "[N]", {0}, "[0]", out_rgb, depth, opacity, weights,
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

// The error a Metal validation pass found (PvrCheckResult, read on the host after the command buffer completed), or OK:
// the same message as the CPU's BadRay.
inline Result BadCheck(const char* op, const PvrCheckResult& c, int64_t N) {
  if (c.code == kVrOk) return Ok();
  if (c.code == kVrBadSigma || c.code == kVrBadT) return BadSample(c.code, c.ray, c.sample, c.sigma, c.t_start, c.t_end);
  return BadLayout(op, c.code, c.ray, N, c.prev_end, c.offset, c.count);
}

}  // namespace packed_volume_render
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (packed_volume_render_metal.cc; float32, shaders
// kernels/packed_volume_render/packed_volume_render.metal). Each plan first
// runs the two validation passes, which leave the first invalid ray's check in
// the `check` slot (a PvrCheckResult the caller reads once the plan has run:
// packed_volume_render::BadCheck gives the op's error), then zero-fills the
// per-sample outputs and renders, one thread per ray. Every Metal path runs
// them (kernels/metal_plan/plan.h).
namespace mo::metal_plan {

// The op's seven inputs, its four outputs (weights [N] when written, else
// empty), the check result.
enum PackedVolumeRenderSlots {
  kPvrSlotSigma,
  kPvrSlotRgb,
  kPvrSlotTStarts,
  kPvrSlotTEnds,
  kPvrSlotOffsets,
  kPvrSlotCounts,
  kPvrSlotBackground,
  kPvrSlotOutRgb,
  kPvrSlotDepth,
  kPvrSlotOpacity,
  kPvrSlotWeights,
  kPvrSlotCheck,
  kPvrSlots
};
// The backward's fifteen inputs (weights and grad_weights empty without a
// weights gradient), its three outputs, the check result.
enum PackedVolumeRenderGradSlots {
  kPvrGradSlotSigma,
  kPvrGradSlotRgb,
  kPvrGradSlotTStarts,
  kPvrGradSlotTEnds,
  kPvrGradSlotOffsets,
  kPvrGradSlotCounts,
  kPvrGradSlotBackground,
  kPvrGradSlotOutRgb,
  kPvrGradSlotDepth,
  kPvrGradSlotOpacity,
  kPvrGradSlotWeights,
  kPvrGradSlotGradRgb,
  kPvrGradSlotGradDepth,
  kPvrGradSlotGradOpacity,
  kPvrGradSlotGradWeights,
  kPvrGradSlotGradSigma,
  kPvrGradSlotGradSamplesRgb,
  kPvrGradSlotGradBackground,
  kPvrGradSlotCheck,
  kPvrGradSlots
};

// Threads of the first validation pass (PvrCheckParams).
constexpr int32_t kPvrCheckThreads = 1024;

// VolumeRender's layout, with samples = N (all rays' samples).
using PackedVolumeRenderLayout = VolumeRenderLayout;
Plan PackedVolumeRenderForward(const PackedVolumeRenderLayout& layout, bool write_weights);
Plan PackedVolumeRenderBackward(const PackedVolumeRenderLayout& layout, bool has_weight_grad);

}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launchers (packed_volume_render.cu.cc), plain C++ over the
// renderers' argument structs (kernels/common/render_args.h): the TF GPU
// kernels and XLA's CUDA handlers (packed_volume_render_cuda.cc) and the
// C-ABI harness (tests/cuda/packed_volume_render_harness.cu.cc).
namespace mo::cuda {

// Forward for R rays over N packed samples (one thread per ray; rays == 0
// launches nothing): sigma [N], rgb [N,3], t_starts / t_ends [N], offsets /
// counts [R] (int32), background [3] or [R,3]; writes out_rgb [R,3], depth
// [R], opacity [R] and, when weights != nullptr, weights [N]. Rays with an
// invalid layout or invalid samples get NaN outputs and, when bad_ray !=
// nullptr, atomically lower *bad_ray to the ray index; initialise it to
// UINT64_MAX.
template <typename T>
cudaError_t LaunchPackedVolumeRenderForward(const PackedVolumeRenderForwardArgs<T>& args, unsigned long long* bad_ray,
                                            cudaStream_t stream);

// Backward (VolumeRender's suffix trick per ray) from the inputs, the
// forward's per-ray outputs and the incoming gradients. weights /
// grad_weights are [N] or both nullptr. grad_background is per ray [R,3].
// Rays with an invalid layout lower *bad_ray (when not nullptr).
template <typename T>
cudaError_t LaunchPackedVolumeRenderBackward(const PackedVolumeRenderBackwardArgs<T>& args, unsigned long long* bad_ray,
                                             cudaStream_t stream);

}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels, once for every C++-API device (one kernel class
// templated on the device, a functor per device: packed_volume_render_cpu.cc,
// packed_volume_render_cuda.cc): the checks above and the output allocation
// of kernels/framework/render_op.h; PackedVolumeRenderFunctor<Device, T> does
// the work. Compiled where TensorFlow's headers are: the file defines
// MO_TF_KERNEL before the include, after kernels/framework/render_op.h.
namespace mo {

// The inputs both directions take first: sigma, rgb, t_starts, t_ends,
// ray_offsets, ray_counts, background.
template <typename T, typename Attrs>
RenderArgs<T> PackedRenderArgs(::tensorflow::OpKernelContext* ctx, const render::RayShapes& shapes,
                               const Attrs& attrs) {
  auto data = [&](int i) { return ctx->input(i).flat<T>().data(); };
  return {shapes.rays, shapes.samples, shapes.background_per_ray, attrs.early_termination,
          data(0), data(1), data(6), attrs.validate};
}

template <typename T>
PackedSamples<T> PackedSamplesOf(::tensorflow::OpKernelContext* ctx) {
  return {ctx->input(2).flat<T>().data(), ctx->input(3).flat<T>().data(), ctx->input(4).flat<int32_t>().data(),
          ctx->input(5).flat<int32_t>().data()};
}

// The checks of the inputs both directions take first, for `op`, and their
// ray shapes.
inline absl::Status CheckPackedInputs(::tensorflow::OpKernelContext* ctx, const char* op,
                                      packed_volume_render::RayShapes* shapes) {
  auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
  return checks::ToStatus(
      packed_volume_render::InputShapes(op, dims(0), dims(1), dims(2), dims(3), dims(4), dims(5), dims(6), shapes));
}

// Defined per device, for rays > 0. Both return the op's error for the first
// invalid ray (packed_volume_render::BadRay: layout first, then sample values
// in the forward) or a launch failure.
template <typename Device, typename T>
struct PackedVolumeRenderFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderBackwardArgs<T>& args);
};

template <typename Device, typename T>
class PackedVolumeRenderOp : public OpKernelWithAttrs<packed_volume_render::Attrs> {
 public:
  using OpKernelWithAttrs<packed_volume_render::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    packed_volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckPackedInputs(ctx, packed_volume_render::kForward, &shapes));
    const int64_t R = shapes.rays, N = shapes.samples;
    PackedVolumeRenderForwardArgs<T> args = {
        PackedRenderArgs<T>(ctx, shapes, attrs_), PackedSamplesOf<T>(ctx), {}};
    OP_REQUIRES_OK(ctx, AllocateRenderOutputs<T>(ctx, R, attrs_.return_weights, TensorShape({N}), TensorShape({0}),
                                                 &args));
    if (R == 0) return;
    OP_REQUIRES_OK(ctx, (PackedVolumeRenderFunctor<Device, T>::Forward(ctx, args)));
  }
};

template <typename Device, typename T>
class PackedVolumeRenderGradOp : public OpKernelWithAttrs<packed_volume_render::GradAttrs> {
 public:
  using OpKernelWithAttrs<packed_volume_render::GradAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const char* op = packed_volume_render::kBackward;
    packed_volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckPackedInputs(ctx, op, &shapes));
    auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, checks::ToStatus(packed_volume_render::GradInputShapes(op, shapes, dims(7), dims(8), dims(9),
                                                                               dims(10), dims(11), dims(12), dims(13),
                                                                               dims(14), &has_weight_grad)));
    PackedVolumeRenderBackwardArgs<T> args = {
        PackedRenderArgs<T>(ctx, shapes, attrs_), PackedSamplesOf<T>(ctx), {}};
    OP_REQUIRES_OK(ctx, AllocateRenderGrads<T>(ctx, 7, shapes.rays, has_weight_grad, &args));
    if (shapes.rays == 0) return;
    OP_REQUIRES_OK(ctx, (PackedVolumeRenderFunctor<Device, T>::Backward(ctx, args)));
  }
};

}  // namespace mo
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_H_
