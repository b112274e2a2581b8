// The renderers' formulas, VolumeRender's (kernels/volume_render/volume_render.h)
// and PackedVolumeRender's (kernels/packed_volume_render/packed_volume_render.h):
// emission-absorption volume rendering of a batch of rays, written once for
// the CPU, CUDA and Metal kernels; in host code, the attributes both declare
// and the checks both make.
//
// Per ray (S samples, interval boundaries t[0..S], sigma >= 0, colours c_i):
//   delta_i = t[i+1] - t[i]            tau_i = sigma_i * delta_i
//   T_i     = exp(-sum_{j<i} tau_j)    (exclusive-sum form; T_0 = 1)
//   alpha_i = 1 - exp(-tau_i) = -expm1(-tau_i)
//   w_i     = T_i * alpha_i            m_i = (t[i] + t[i+1]) / 2
//   opacity = sum w_i                  depth = sum w_i m_i
//   rgb     = sum w_i c_i + background * (1 - opacity)
// Early termination: the first sample i with T_i < early_termination and all
// samples after it are skipped (w = 0); 0 disables it. K = samples used.
//
// Backward (suffix trick, no cumprod, no division by 1 - alpha): with
//   g_i = dL/dw_i = gC . (c_i - background) + gO + gD m_i + gW_i
// (gC, gD, gO, gW: incoming gradients of rgb, depth, opacity, weights) and
//   G = sum_{i<K} g_i w_i = gC . (rgb - background) + gO opacity + gD depth + sum gW_i w_i
// computed from the forward's per-ray outputs,
//   dL/dtau_i   = g_i T_{i+1} - sum_{i<j<K} g_j w_j = g_i T_{i+1} - (G - sum_{j<=i} g_j w_j)
//   dL/dsigma_i = delta_i dL/dtau_i        dL/dc_i = gC w_i        (0 for i >= K)
//   dL/dbackground = gC (1 - opacity)
// The backward replays the forward's sample loop (same helper, same K), so the
// gradient is the exact gradient of the function the forward computes.
//
// The scalar type T is a template parameter and transcendental functions come
// from a math policy M (M::exp, M::expm1): kernels use VrFloatMath below; the
// CPU and CUDA files add a double policy for float64 validation. No double in
// this header (Metal has none).
#ifndef MO_KERNELS_COMMON_VOLUME_RENDER_MATH_H_
#define MO_KERNELS_COMMON_VOLUME_RENDER_MATH_H_

#include "kernels/common/platform.h"
#include "kernels/common/render_args.h"

namespace mo {

// Arguments of the Metal dispatches (same layout in the shaders and on the host).
struct VolumeRenderParams {
  int64 num_rays;
  int64 num_samples;
  float early_termination;
  int32 background_per_ray;  // 1: background is [R, 3]; 0: one colour [3]
  int32 write_weights;       // forward: write weights [R, S]
  int32 has_weight_grad;     // backward: weights and grad_weights are [R, S]
};

// The one place the struct is filled (Metal glue and the MSL-shim tests).
MO_FN VolumeRenderParams make_volume_render_params(int64 num_rays, int64 num_samples, float early_termination,
                                                   bool background_per_ray, bool write_weights,
                                                   bool has_weight_grad) {
  VolumeRenderParams p;
  p.num_rays = num_rays;
  p.num_samples = num_samples;
  p.early_termination = early_termination;
  p.background_per_ray = background_per_ray ? 1 : 0;
  p.write_weights = write_weights ? 1 : 0;
  p.has_weight_grad = has_weight_grad ? 1 : 0;
  return p;
}

// The sizes and attributes of a Metal dispatch's arguments; the shader sets
// the pointers from its buffers.
template <typename T>
MO_FN void vr_set_render_args(MO_CONSTANT VolumeRenderParams& p, MO_THREAD RenderArgs<T>* a) {
  a->rays = p.num_rays;
  a->samples = p.num_samples;
  a->background_per_ray = p.background_per_ray != 0;
  a->early_termination = p.early_termination;
}

// Math policy for float (all backends).
struct VrFloatMath {
  static MO_FN float exp(float x) { return exp_f(x); }
  static MO_FN float expm1(float x) { return expm1_f(x); }
};

// Result of checking one ray's inputs: code 0 = valid; 1 = sigma[sample] is
// negative or NaN; 2 = t[sample + 1] < t[sample] (or NaN): t must be non-decreasing.
struct VrCheck {
  int32 code;
  int64 sample;
};

enum { kVrOk = 0, kVrBadSigma = 1, kVrBadT = 2 };

// The input rules: sigma_i >= 0 (not NaN); t[i+1] >= t[i] (not NaN).
template <typename T>
MO_FN bool vr_sigma_ok(T sigma) { return sigma >= T(0); }
template <typename T>
MO_FN bool vr_t_ok(T t0, T t1) { return t1 >= t0; }

// The same rules over samples given by their intervals [t0[i], t1[i]]
// (t0 = t, t1 = t + 1 for a fixed-S row; t_starts / t_ends for packed samples).
template <typename T>
MO_FN VrCheck vr_check_samples(const MO_DEVICE T* sigma, const MO_DEVICE T* t0, const MO_DEVICE T* t1, int64 n) {
  VrCheck check;
  check.code = kVrOk;
  check.sample = 0;
  for (int64 i = 0; i < n; ++i) {
    if (!vr_sigma_ok(sigma[i])) {
      check.code = kVrBadSigma;
      check.sample = i;
      return check;
    }
  }
  for (int64 i = 0; i < n; ++i) {
    if (!vr_t_ok(t0[i], t1[i])) {
      check.code = kVrBadT;
      check.sample = i;
      return check;
    }
  }
  return check;
}

template <typename T>
MO_FN VrCheck vr_check_ray(const MO_DEVICE T* sigma, const MO_DEVICE T* t, int64 S) {
  return vr_check_samples(sigma, t, t + 1, S);
}

// ---- The formulas, one function each. V is a scalar (T) or, in the CPU
// kernel, a SIMD packet of T; M supplies exp/expm1 for V. ----------------------

// delta_i = t[i+1] - t[i]; m_i = (t[i] + t[i+1]) / 2; tau_i = sigma_i delta_i.
template <typename T>
MO_FN T vr_delta(T t0, T t1) { return t1 - t0; }
template <typename T>
MO_FN T vr_mid(T t0, T t1) { return T(0.5) * (t0 + t1); }
template <typename T>
MO_FN T vr_tau(T sigma, T delta) { return sigma * delta; }

// rgb = sum w_i c_i + background (1 - opacity), one channel.
template <typename T>
MO_FN T vr_composite(T weighted_colour, T background, T opacity) {
  return weighted_colour + background * (T(1) - opacity);
}

// alpha_i = 1 - exp(-tau_i), without cancellation for small tau.
template <typename M, typename V>
MO_FN V vr_alpha(V tau) { return -M::expm1(-tau); }

// T_i = exp(-sum_{j<i} tau_j) from the exclusive prefix sum `cum`.
template <typename M, typename V>
MO_FN V vr_transmittance(V cum) { return M::exp(-cum); }

// Early termination: sample i is used while T_i >= early_termination (0: always).
template <typename T>
MO_FN bool vr_sample_used(T trans, T early_termination) { return !(trans < early_termination); }

// g_i = dL/dw_i = gC . c_i + (gO - gC . background) + gD m_i (+ gW_i by the caller).
template <typename T>
MO_FN T vr_weight_grad(T gr, T gg, T gb, T cr, T cg, T cb, T g_const, T grad_depth, T mid) {
  return gr * cr + gg * cg + gb * cb + g_const + grad_depth * mid;
}

// The per-ray constant of g_i: gO - gC . background.
template <typename T>
MO_FN T vr_weight_grad_const(MO_DEVICE const T* grad_rgb, MO_DEVICE const T* background, T grad_opacity) {
  return grad_opacity - (grad_rgb[0] * background[0] + grad_rgb[1] * background[1] + grad_rgb[2] * background[2]);
}

// G = sum_{i<K} g_i w_i from the forward's per-ray outputs (without the
// sum gW_i w_i term, which the caller adds when weights are differentiated).
template <typename T>
MO_FN T vr_grad_total(MO_DEVICE const T* grad_rgb, MO_DEVICE const T* out_rgb, MO_DEVICE const T* background,
                      T grad_opacity, T out_opacity, T grad_depth, T out_depth) {
  return grad_rgb[0] * (out_rgb[0] - background[0]) + grad_rgb[1] * (out_rgb[1] - background[1]) +
         grad_rgb[2] * (out_rgb[2] - background[2]) + grad_opacity * out_opacity + grad_depth * out_depth;
}

// dL/dsigma_i = delta_i (g_i T_{i+1} - sum_{i<j<K} g_j w_j).
template <typename T>
MO_FN T vr_sigma_grad(T delta, T g, T trans_next, T suffix) { return delta * (g * trans_next - suffix); }

// dL/dbackground (this ray) = gC (1 - opacity).
template <typename T>
MO_FN void vr_background_grad(MO_DEVICE const T* grad_rgb, T out_opacity, MO_DEVICE T* grad_background) {
  const T rest = T(1) - out_opacity;
  grad_background[0] = grad_rgb[0] * rest;
  grad_background[1] = grad_rgb[1] * rest;
  grad_background[2] = grad_rgb[2] * rest;
}

// ---- The scalar drivers (one thread per ray: CUDA, Metal, MSL shim). ----------

// One sample of the transmittance walk: everything forward and backward need.
template <typename T>
struct VrSample {
  T delta;       // t[i+1] - t[i]
  T mid;         // (t[i] + t[i+1]) / 2
  T w;           // T_i alpha_i
  T trans_next;  // T_{i+1}
};

// The transmittance walk along one ray. Usage:
//   VrWalk<T, M> walk(early_termination); while (walk.next(sigma, t, t + 1, S, &s)) { ... }
// next() returns false once all S samples are used or T_i < early_termination.
template <typename T, typename M>
struct VrWalk {
  T early_termination;
  T cum;    // sum_{j<i} tau_j (exclusive prefix sum)
  T trans;  // T_i
  int64 i;

  MO_FN VrWalk(T early_termination_) : early_termination(early_termination_), cum(T(0)), trans(T(1)), i(0) {}

  // Sample i covers [t0[i], t1[i]] (t0 = t, t1 = t + 1 for a fixed-S row).
  MO_FN bool next(const MO_DEVICE T* sigma, const MO_DEVICE T* t0, const MO_DEVICE T* t1, int64 S,
                  MO_THREAD VrSample<T>* s) {
    if (i >= S || !vr_sample_used(trans, early_termination)) return false;
    s->delta = vr_delta(t0[i], t1[i]);
    s->mid = vr_mid(t0[i], t1[i]);
    const T tau = vr_tau(sigma[i], s->delta);
    s->w = trans * vr_alpha<M>(tau);
    cum = cum + tau;
    s->trans_next = vr_transmittance<M>(cum);
    trans = s->trans_next;
    ++i;
    return true;
  }
};

// Outputs of an invalid ray: NaN everywhere (CPU and CUDA-in-TF also raise
// InvalidArgument; Metal leaves the NaNs, see docs/VOLUME_RENDER.md).
template <typename T>
MO_FN void vr_write_invalid(MO_DEVICE T* out_rgb, MO_DEVICE T* out_depth, MO_DEVICE T* out_opacity,
                            MO_DEVICE T* weights, int64 S, bool write_weights) {
  const T nan = T(NAN);
  out_rgb[0] = nan;
  out_rgb[1] = nan;
  out_rgb[2] = nan;
  *out_depth = nan;
  *out_opacity = nan;
  if (write_weights) {
    for (int64 i = 0; i < S; ++i) weights[i] = nan;
  }
}

// Forward for one ray. Pointers are the ray's rows: sigma[S], rgb[S*3], the
// intervals [t0[i], t1[i]] (t0 = t, t1 = t + 1 for a row t[S+1]),
// background[3]; outputs out_rgb[3], *out_depth, *out_opacity and, when
// write_weights, weights[S]. Returns the input check (outputs are NaN when it
// fails).
template <typename T, typename M>
MO_FN VrCheck vr_forward_samples(const MO_DEVICE T* sigma, const MO_DEVICE T* rgb, const MO_DEVICE T* t0,
                                 const MO_DEVICE T* t1, const MO_DEVICE T* background, int64 S,
                                 T early_termination, MO_DEVICE T* out_rgb, MO_DEVICE T* out_depth,
                                 MO_DEVICE T* out_opacity, MO_DEVICE T* weights, bool write_weights) {
  const VrCheck check = vr_check_samples(sigma, t0, t1, S);
  if (check.code != kVrOk) {
    vr_write_invalid(out_rgb, out_depth, out_opacity, weights, S, write_weights);
    return check;
  }
  T r = T(0), g = T(0), b = T(0), depth = T(0), opacity = T(0);
  VrWalk<T, M> walk(early_termination);
  VrSample<T> s;
  while (walk.next(sigma, t0, t1, S, &s)) {
    const int64 i = walk.i - 1;
    r += s.w * rgb[3 * i + 0];
    g += s.w * rgb[3 * i + 1];
    b += s.w * rgb[3 * i + 2];
    depth += s.w * s.mid;
    opacity += s.w;
    if (write_weights) weights[i] = s.w;
  }
  if (write_weights) {
    for (int64 i = walk.i; i < S; ++i) weights[i] = T(0);
  }
  out_rgb[0] = vr_composite(r, background[0], opacity);
  out_rgb[1] = vr_composite(g, background[1], opacity);
  out_rgb[2] = vr_composite(b, background[2], opacity);
  *out_depth = depth;
  *out_opacity = opacity;
  return check;
}

// Backward for one ray. Inputs: the ray's rows of sigma, rgb, its intervals
// [t0[i], t1[i]] (as in vr_forward_samples), background, the forward outputs
// out_rgb[3], depth, opacity, and the incoming gradients grad_rgb[3],
// grad_depth, grad_opacity; when has_weight_grad also the forward's
// weights[S] and grad_weights[S]. Writes grad_sigma[S], grad_samples_rgb[S*3]
// and grad_background[3] (this ray's contribution).
template <typename T, typename M>
MO_FN void vr_backward_samples(const MO_DEVICE T* sigma, const MO_DEVICE T* rgb, const MO_DEVICE T* t0,
                               const MO_DEVICE T* t1, const MO_DEVICE T* background, int64 S,
                               T early_termination, const MO_DEVICE T* out_rgb, T out_depth, T out_opacity,
                               const MO_DEVICE T* weights, const MO_DEVICE T* grad_rgb, T grad_depth,
                               T grad_opacity, const MO_DEVICE T* grad_weights, bool has_weight_grad,
                               MO_DEVICE T* grad_sigma, MO_DEVICE T* grad_samples_rgb,
                               MO_DEVICE T* grad_background) {
  const T gr = grad_rgb[0], gg = grad_rgb[1], gb = grad_rgb[2];
  T total = vr_grad_total(grad_rgb, out_rgb, background, grad_opacity, out_opacity, grad_depth, out_depth);
  if (has_weight_grad) {
    for (int64 i = 0; i < S; ++i) total += grad_weights[i] * weights[i];
  }
  const T g_const = vr_weight_grad_const(grad_rgb, background, grad_opacity);
  T prefix = T(0);
  VrWalk<T, M> walk(early_termination);
  VrSample<T> s;
  while (walk.next(sigma, t0, t1, S, &s)) {
    const int64 i = walk.i - 1;
    T g = vr_weight_grad(gr, gg, gb, rgb[3 * i + 0], rgb[3 * i + 1], rgb[3 * i + 2], g_const, grad_depth, s.mid);
    if (has_weight_grad) g += grad_weights[i];
    prefix += g * s.w;
    grad_sigma[i] = vr_sigma_grad(s.delta, g, s.trans_next, total - prefix);
    grad_samples_rgb[3 * i + 0] = gr * s.w;
    grad_samples_rgb[3 * i + 1] = gg * s.w;
    grad_samples_rgb[3 * i + 2] = gb * s.w;
  }
  for (int64 i = walk.i; i < S; ++i) {
    grad_sigma[i] = T(0);
    grad_samples_rgb[3 * i + 0] = T(0);
    grad_samples_rgb[3 * i + 1] = T(0);
    grad_samples_rgb[3 * i + 2] = T(0);
  }
  vr_background_grad(grad_rgb, out_opacity, grad_background);
}

}  // namespace mo

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cstdint>
#include <string>

#include "kernels/spec/checks.h"  // host
#include "kernels/spec/op_attrs.h"  // host

// The renderers' attributes (kernels/spec/op_attrs.h): the backward's, then
// the forward's, which adds return_weights. Each op declares them under its
// own names (MO_VOLUME_RENDER_ATTRS, MO_PACKED_VOLUME_RENDER_ATTRS).
// validate: raise for the first invalid ray (RenderArgs::validate).
#define MO_RENDER_GRAD_ATTRS(ATTR) ATTR(early_termination, Float, 1e-4, 0, 1) ATTR(validate, Bool, true)
#define MO_RENDER_ATTRS(ATTR) MO_RENDER_GRAD_ATTRS(ATTR) ATTR(return_weights, Bool, false)

namespace mo {
namespace render {

// The sizes the inputs shared by forward and backward give.
struct RayShapes {
  int64_t rays = 0;
  int64_t samples = 0;
  bool background_per_ray = false;
};

// background: one colour [3] or one per ray [R, 3] (*per_ray), for every renderer.
inline Result Background(const char* op, const Dims& background, int64_t R, bool* per_ray) {
  *per_ray = background == Dims{R, 3};
  if (!(background == Dims{3} || *per_ray)) {
    return Invalid(op, ": 'background' must be [3] or [R, 3] = [", R, ", 3], got shape ", ShapeString(background));
  }
  return Ok();
}

// The forward outputs and upstream gradients a renderer's backward receives,
// for R rays: out_rgb and grad_rgb [R, 3], depth, opacity and their gradients
// [R], weights and grad_weights both `full` (spelt `full_spec`, e.g. "[R, S]")
// or both `none` (`none_spec`). *has_weight_grad: the weights were returned
// (`full`) and there are samples (`samples` > 0).
inline Result RenderGradShapes(const char* op, int64_t R, int64_t samples, const Dims& full, const char* full_spec,
                               const Dims& none, const char* none_spec, const Dims& out_rgb, const Dims& depth,
                               const Dims& opacity, const Dims& weights, const Dims& grad_rgb, const Dims& grad_depth,
                               const Dims& grad_opacity, const Dims& grad_weights, bool* has_weight_grad) {
  const Dims ray3 = {R, 3}, ray = {R};
  if (!(out_rgb == ray3 && grad_rgb == ray3)) {
    return Invalid(op, ": 'out_rgb' and 'grad_rgb' must be [R, 3] = ", ShapeString(ray3), ", got ",
                   ShapeString(out_rgb), " and ", ShapeString(grad_rgb));
  }
  if (!(depth == ray && opacity == ray && grad_depth == ray && grad_opacity == ray)) {
    return Invalid(op, ": 'depth', 'opacity', 'grad_depth' and 'grad_opacity' must be [R] = ", ShapeString(ray));
  }
  const bool weights_full = weights == full;
  if (!((weights_full || weights == none) && grad_weights == weights)) {
    std::string sizes;
    for (size_t d = 0; d < full.size(); ++d) sizes += (d ? ", " : "") + std::to_string(full[d]);
    return Invalid(op, ": 'weights' and 'grad_weights' must both be ", full_spec, " = [", sizes, "] or ", none_spec,
                   ", got ", ShapeString(weights), " and ", ShapeString(grad_weights));
  }
  *has_weight_grad = weights_full && samples > 0;
  return Ok();
}

}  // namespace render

namespace metal_plan {

// The rays of a render, what both renderers' Metal plans are built from.
struct VolumeRenderLayout {
  int64_t rays;     // > 0
  int64_t samples;  // per ray (S); PackedVolumeRender: in all (N)
  float early_termination;
  bool background_per_ray;
};

}  // namespace metal_plan
}  // namespace mo
#endif  // host code

#endif  // MO_KERNELS_COMMON_VOLUME_RENDER_MATH_H_
