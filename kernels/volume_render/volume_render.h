// VolumeRender: emission-absorption volume rendering of R rays of S samples
// each, sigma [R, S], rgb [R, S, 3], t [R, S + 1] (interval boundaries),
// background [3] or [R, 3]. The formulas are the renderers'
// (kernels/common/volume_render_math.h); this header adds the Metal buffer
// indices, the per-ray drivers over [R, S] rows every backend runs and, in
// host code, the op's declaration, checks, plans, launchers, CPU bodies and
// kernel classes.
#ifndef MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_H_
#define MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_H_

#include "kernels/common/platform.h"
#include "kernels/common/render_args.h"
#include "kernels/common/volume_render_math.h"

namespace mo {

// The Metal buffer indices of the VolumeRender shaders: the inputs in op
// order, the outputs, the VolumeRenderParams (declared by
// kernels/volume_render/volume_render.metal, bound by volume_render_metal.cc's plans).
enum VolumeRenderForwardBuffer {
  kVrForwardSigma,
  kVrForwardRgb,
  kVrForwardT,
  kVrForwardBackground,
  kVrForwardOutRgb,
  kVrForwardDepth,
  kVrForwardOpacity,
  kVrForwardWeights,
  kVrForwardParams
};
enum VolumeRenderBackwardBuffer {
  kVrBackwardSigma,
  kVrBackwardRgb,
  kVrBackwardT,
  kVrBackwardBackground,
  kVrBackwardOutRgb,
  kVrBackwardDepth,
  kVrBackwardOpacity,
  kVrBackwardWeights,
  kVrBackwardGradRgb,
  kVrBackwardGradDepth,
  kVrBackwardGradOpacity,
  kVrBackwardGradWeights,
  kVrBackwardGradSigma,
  kVrBackwardGradSamplesRgb,
  kVrBackwardGradBackground,
  kVrBackwardParams
};

// Forward for ray r of a [R, S] batch (vr_forward_samples over its rows).
template <typename T, typename M>
MO_FN VrCheck vr_forward_ray(MO_THREAD const VolumeRenderForwardArgs<T>& a, int64 r) {
  const int64 S = a.samples;
  const bool write_weights = a.weights != nullptr;
  const MO_DEVICE T* t = a.t + r * (S + 1);
  return vr_forward_samples<T, M>(a.sigma + r * S, a.rgb + r * S * 3, t, t + 1,
                                  a.background + (a.background_per_ray ? r * 3 : 0), S, T(a.early_termination),
                                  a.out_rgb + r * 3, a.depth + r, a.opacity + r,
                                  write_weights ? a.weights + r * S : a.weights, write_weights);
}

// Backward for ray r of a [R, S] batch (vr_backward_samples over its rows);
// the weights are differentiated when a.weights and a.grad_weights are set.
template <typename T, typename M>
MO_FN void vr_backward_ray(MO_THREAD const VolumeRenderBackwardArgs<T>& a, int64 r) {
  const int64 S = a.samples;
  const bool has_weight_grad = a.weights != nullptr && a.grad_weights != nullptr;
  const MO_DEVICE T* t = a.t + r * (S + 1);
  vr_backward_samples<T, M>(a.sigma + r * S, a.rgb + r * S * 3, t, t + 1,
                            a.background + (a.background_per_ray ? r * 3 : 0), S, T(a.early_termination),
                            a.out_rgb + r * 3, a.depth[r], a.opacity[r],
                            has_weight_grad ? a.weights + r * S : a.weights, a.grad_rgb + r * 3, a.grad_depth[r],
                            a.grad_opacity[r], has_weight_grad ? a.grad_weights + r * S : a.grad_weights,
                            has_weight_grad, a.grad_sigma + r * S, a.grad_samples_rgb + r * S * 3,
                            a.grad_background + r * 3);
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsVolumeRender takes early_termination, validate and return_weights,
// MetalOpsVolumeRenderGrad the first two (the renderers' lists,
// kernels/common/volume_render_math.h).
#define MO_VOLUME_RENDER_ATTRS(ATTR) MO_RENDER_ATTRS(ATTR)
#define MO_VOLUME_RENDER_GRAD_ATTRS(ATTR) MO_RENDER_GRAD_ATTRS(ATTR)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include <cstdint>

#include "kernels/spec/checks.h"  // host
#include "kernels/spec/op_attrs.h"  // host

// The checks of the op's inputs, written once for every kernel of the op: no
// TensorFlow API, sizes and values in, kernels/spec/checks.h's Result out.
// Messages start with the op's name (`op`) and name the argument; tests match
// on them.
namespace mo {
namespace volume_render {

constexpr const char kForward[] = "MetalOpsVolumeRender";
constexpr const char kBackward[] = "MetalOpsVolumeRenderGrad";

// Attrs, ReadAttrs, VisitAttrs of the forward; GradAttrs of the backward.
MO_DECLARE_ATTRS(kForward, MO_VOLUME_RENDER_ATTRS);
namespace grad {
MO_DECLARE_ATTRS(kBackward, MO_VOLUME_RENDER_GRAD_ATTRS);
}  // namespace grad
using GradAttrs = grad::Attrs;

using render::RayShapes;

// sigma [R, S], rgb [R, S, 3], t [R, S + 1], background [3] or [R, 3].
inline Result InputShapes(const char* op, const Dims& sigma, const Dims& rgb, const Dims& t,
                          const Dims& background, RayShapes* shapes) {
  if (sigma.size() != 2) {
    return Invalid(op, ": 'sigma' must be [R, S] (rank 2), got shape ", ShapeString(sigma));
  }
  const int64_t R = sigma[0], S = sigma[1];
  if (rgb != Dims{R, S, 3}) {
    return Invalid(op, ": 'rgb' must be [R, S, 3] = [", R, ", ", S, ", 3] to match 'sigma' ", ShapeString(sigma),
                   ", got shape ", ShapeString(rgb));
  }
  if (t != Dims{R, S + 1}) {
    return Invalid(op, ": 't' must be [R, S + 1] = [", R, ", ", S + 1, "] (interval boundaries) to match 'sigma' ",
                   ShapeString(sigma), ", got shape ", ShapeString(t));
  }
  bool per_ray = false;
  MO_RETURN_IF_INVALID(render::Background(op, background, R, &per_ray));
  shapes->rays = R;
  shapes->samples = S;
  shapes->background_per_ray = per_ray;
  return Ok();
}

// VolumeRenderGrad's forward outputs and upstream gradients, for `shapes`
// from InputShapes: weights [R, S] when returned, else [R, 0].
inline Result GradInputShapes(const char* op, const RayShapes& shapes, const Dims& out_rgb, const Dims& depth,
                              const Dims& opacity, const Dims& weights, const Dims& grad_rgb, const Dims& grad_depth,
                              const Dims& grad_opacity, const Dims& grad_weights, bool* has_weight_grad) {
  const int64_t R = shapes.rays, S = shapes.samples;
  return render::RenderGradShapes(op, R, S, {R, S}, "[R, S]", {R, 0}, "[R, 0]", out_rgb, depth, opacity, weights,
                                  grad_rgb, grad_depth, grad_opacity, grad_weights, has_weight_grad);
}

// The forward op's error for ray r, which failed vr_check_ray with `check`;
// sigma_row (S values) and t_row (S + 1) are that ray in host memory.
template <typename T>
Result BadRay(const VrCheck& check, int64_t r, const T* sigma_row, const T* t_row) {
  const int64_t i = check.sample;
  if (check.code == kVrBadSigma) {
    return Invalid(kForward, ": 'sigma' must be non-negative (and not NaN): ray ", r, ", sample ", i,
                   " has sigma = ", static_cast<double>(sigma_row[i]));
  }
  return Invalid(kForward, ": 't' must be non-decreasing along each ray: ray ", r, " has t[", i + 1,
                 "] = ", static_cast<double>(t_row[i + 1]), " < t[", i, "] = ", static_cast<double>(t_row[i]));
}

}  // namespace volume_render
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (volume_render_metal.cc; float32, shaders
// kernels/volume_render/volume_render.metal, one thread per ray): which
// tensor slot at which named buffer index, how many threads. Every Metal path
// runs them (kernels/metal_plan/plan.h).
namespace mo::metal_plan {

// The op's inputs then its outputs, in the op's order. weights is [R, S] when
// written, else empty.
enum VolumeRenderSlots {
  kVrSlotSigma,
  kVrSlotRgb,
  kVrSlotT,
  kVrSlotBackground,
  kVrSlotOutRgb,
  kVrSlotDepth,
  kVrSlotOpacity,
  kVrSlotWeights,
  kVrSlots
};
// The backward's twelve inputs (weights and grad_weights empty without a
// weights gradient), then grad_sigma, grad_samples_rgb, grad_background.
enum VolumeRenderGradSlots {
  kVrGradSlotSigma,
  kVrGradSlotRgb,
  kVrGradSlotT,
  kVrGradSlotBackground,
  kVrGradSlotOutRgb,
  kVrGradSlotDepth,
  kVrGradSlotOpacity,
  kVrGradSlotWeights,
  kVrGradSlotGradRgb,
  kVrGradSlotGradDepth,
  kVrGradSlotGradOpacity,
  kVrGradSlotGradWeights,
  kVrGradSlotGradSigma,
  kVrGradSlotGradSamplesRgb,
  kVrGradSlotGradBackground,
  kVrGradSlots
};

Plan VolumeRenderForward(const VolumeRenderLayout& layout, bool write_weights);
Plan VolumeRenderBackward(const VolumeRenderLayout& layout, bool has_weight_grad);

}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launchers (volume_render.cu.cc), plain C++ over the renderers'
// argument structs (kernels/common/render_args.h): the TF GPU kernels and
// XLA's CUDA handlers (volume_render_cuda.cc) and the C-ABI harness
// (tests/cuda/volume_render_harness.cu.cc).
namespace mo::cuda {

// Forward for R rays of S samples (one thread per ray; rays == 0 launches
// nothing): sigma [R,S], rgb [R,S,3], t [R,S+1], background [3] or [R,3];
// writes out_rgb [R,3], depth [R], opacity [R] and, when weights != nullptr,
// weights [R,S]. Invalid rays (sigma < 0 or NaN; t decreasing) get NaN
// outputs and, when bad_rays != nullptr, atomically lower bad_rays[0] (sigma)
// or bad_rays[1] (t) to the ray index; initialise both to UINT64_MAX.
template <typename T>
cudaError_t LaunchVolumeRenderForward(const VolumeRenderForwardArgs<T>& args, unsigned long long* bad_rays,
                                      cudaStream_t stream);

// Backward (suffix trick) from the inputs, the forward's per-ray outputs and
// the incoming gradients. weights / grad_weights are [R,S] or both nullptr.
// grad_background is per ray [R,3].
template <typename T>
cudaError_t LaunchVolumeRenderBackward(const VolumeRenderBackwardArgs<T>& args, cudaStream_t stream);

}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_CPU_BODIES)
// The per-ray bodies of the CPU kernels (volume_render_cpu.cc schedules them
// over rays), free of TensorFlow so that tests/test_neon_qemu.py builds them
// for arm64 and runs them under qemu; a file that wants them defines
// MO_CPU_BODIES before the include. Eigen's packet math (AVX-512, AVX, SSE or
// NEON, whatever the build targets) in phase B.
#include <cmath>
#include <type_traits>
#include <vector>

#include "Eigen/Core"  // host

namespace mo {
namespace volume_render_cpu {

// SIMD math policy for phase B: Eigen's packet exp (AVX-512, AVX, SSE or
// NEON, whatever the build targets) and an expm1 built on it.
template <typename T>
struct VrPacketMath {
  typedef typename Eigen::internal::packet_traits<T>::type Packet;
  static Packet exp(Packet x) { return Eigen::internal::pexp(x); }
  // Per lane: the Eigen of TF 2.19 (the macOS pin) has no pexpm1 for NEON
  // double packets, and double is the precise path rather than the fast one.
  static Packet expm1(Packet x) {
    constexpr int kLanes = Eigen::internal::packet_traits<T>::size;  // the lanes of Packet
    T lanes[kLanes];
    Eigen::internal::pstoreu(lanes, x);
    for (int i = 0; i < kLanes; ++i) lanes[i] = std::expm1(lanes[i]);
    return Eigen::internal::ploadu<Packet>(lanes);
  }
};

// float: Eigen's generic pexpm1 costs an exp, a log and a division. This one
// costs an exp and a polynomial: for |x| < 1/2 the Taylor series to x^8
// (truncation x^9/9! < 1.5e-8 relative), elsewhere exp(x) - 1 (relative error
// < 2e-7 there, since |exp(x) - 1| > 0.39).
template <>
struct VrPacketMath<float> {
  typedef Eigen::internal::packet_traits<float>::type Packet;
  static Packet exp(Packet x) { return Eigen::internal::pexp(x); }
  static Packet expm1(Packet x) {
    using namespace Eigen::internal;  // NOLINT
    Packet p = pset1<Packet>(1.0f / 40320.0f);
    p = pmadd(p, x, pset1<Packet>(1.0f / 5040.0f));
    p = pmadd(p, x, pset1<Packet>(1.0f / 720.0f));
    p = pmadd(p, x, pset1<Packet>(1.0f / 120.0f));
    p = pmadd(p, x, pset1<Packet>(1.0f / 24.0f));
    p = pmadd(p, x, pset1<Packet>(1.0f / 6.0f));
    p = pmadd(p, x, pset1<Packet>(0.5f));
    p = pmadd(p, x, pset1<Packet>(1.0f));
    const Packet series = pmul(p, x);
    const Packet direct = psub(pexp(x), pset1<Packet>(1.0f));
    return pselect(pcmp_lt(pabs(x), pset1<Packet>(0.5f)), series, direct);
  }
};

// Exclusive prefix sums out[i] = x[0] + ... + x[i-1] for i < n, in four
// interleaved chains over the quarters of [0, 4 floor(n/4)) (a single chain of
// adds is latency-bound), each quarter then offset by the sums before it, and
// the last n mod 4 elements appended. Returns the total.
template <typename T>
T ExclusivePrefixSum(const T* x, T* out, int64_t n) {
  const int64_t q = n / 4;
  const T *x0 = x, *x1 = x + q, *x2 = x + 2 * q, *x3 = x + 3 * q;
  T *o0 = out, *o1 = out + q, *o2 = out + 2 * q, *o3 = out + 3 * q;
  T a0 = T(0), a1 = T(0), a2 = T(0), a3 = T(0);
  for (int64_t j = 0; j < q; ++j) {
    o0[j] = a0;
    o1[j] = a1;
    o2[j] = a2;
    o3[j] = a3;
    a0 = a0 + x0[j];
    a1 = a1 + x1[j];
    a2 = a2 + x2[j];
    a3 = a3 + x3[j];
  }
  const T off1 = a0, off2 = off1 + a1, off3 = off2 + a2;
  for (int64_t j = 0; j < q; ++j) {
    o1[j] = off1 + o1[j];
    o2[j] = off2 + o2[j];
    o3[j] = off3 + o3[j];
  }
  T total = off3 + a3;
  for (int64_t i = 4 * q; i < n; ++i) {
    out[i] = total;
    total = total + x[i];
  }
  return total;
}

// Per-thread scratch of one ray: tau, cum, alpha, trans padded to whole packets.
template <typename T>
struct RayScratch {
  typedef typename VrPacketMath<T>::Packet Packet;
  static constexpr int64_t kLanes = Eigen::internal::unpacket_traits<Packet>::size;
  int64_t padded = 0;
  std::vector<T> tau, cum, alpha, trans;
  std::vector<T> w, w3, g, gw, gw_before;  // forward / backward per-sample values

  explicit RayScratch(int64_t samples) {
    padded = ((samples + 1 + kLanes - 1) / kLanes) * kLanes;
    tau.assign(padded, T(0));
    cum.assign(padded, T(0));
    alpha.assign(padded, T(0));
    trans.assign(padded, T(0));
    w.assign(padded, T(0));
    w3.assign(3 * padded, T(0));
    g.assign(padded, T(0));
    gw.assign(padded, T(0));
    gw_before.assign(padded, T(0));
  }

  // Phases A and B for one ray; returns K, the number of samples used.
  // alpha[i] and trans[i] are valid for i < K and trans[K] too (packets past
  // the one holding sample K are not computed).
  int64_t Walk(const T* sigma, const T* t, int64_t S, T early_termination) {
    for (int64_t i = 0; i < S; ++i) tau[i] = mo::vr_tau(sigma[i], mo::vr_delta(t[i], t[i + 1]));
    const T offset = ExclusivePrefixSum(tau.data(), cum.data(), S);
    for (int64_t i = S; i < padded; ++i) {
      tau[i] = T(0);
      cum[i] = offset;
    }
    const Packet p_early_termination = Eigen::internal::pset1<Packet>(early_termination);
    for (int64_t j = 0; j < padded; j += kLanes) {
      const Packet p_tau = Eigen::internal::ploadu<Packet>(&tau[j]);
      const Packet p_cum = Eigen::internal::ploadu<Packet>(&cum[j]);
      const Packet p_trans = mo::vr_transmittance<VrPacketMath<T>>(p_cum);
      Eigen::internal::pstoreu(&alpha[j], mo::vr_alpha<VrPacketMath<T>>(p_tau));
      Eigen::internal::pstoreu(&trans[j], p_trans);
      if (j == 0) trans[0] = T(1);  // T_0 = 1 by definition, as in VrWalk
      if (Eigen::internal::predux_any(Eigen::internal::pcmp_lt(p_trans, p_early_termination))) {
        const int64_t end = j + kLanes < S ? j + kLanes : S;
        for (int64_t i = j; i < end; ++i) {
          if (!mo::vr_sample_used(trans[i], early_termination)) return i;
        }
      }
    }
    return S;
  }
};

// The rules of vr_check_ray without early exits (vectorisable); on failure the
// caller runs vr_check_ray to locate the bad sample.
template <typename T>
bool AllValid(const T* sigma, const T* t, int64_t S) {
  int bad = 0;
  for (int64_t i = 0; i < S; ++i) bad |= mo::vr_sigma_ok(sigma[i]) ? 0 : 1;
  for (int64_t i = 0; i < S; ++i) bad |= mo::vr_t_ok(t[i], t[i + 1]) ? 0 : 1;
  return bad == 0;
}

// Ray r's rows of the inputs both passes read: sigma [S], rgb [S, 3], t [S + 1], background [3].
template <typename T>
struct InputRowsOf {
  const T *sigma, *rgb, *t, *background;
};

template <typename Args>
auto InputRows(const Args& a, int64_t r) {
  const int64_t S = a.samples;
  using T = typename std::remove_const<typename std::remove_pointer<decltype(a.sigma)>::type>::type;
  return InputRowsOf<T>{a.sigma + r * S, a.rgb + r * S * 3, a.t + r * (S + 1),
                        a.background + (a.background_per_ray ? r * 3 : 0)};
}

// Forward of ray r, a valid one (its rows as vr_forward_ray takes them);
// a.weights may be nullptr.
template <typename T>
void ForwardRay(RayScratch<T>* scratch, const VolumeRenderForwardArgs<T>& a, int64_t r) {
  const int64_t S = a.samples;
  const auto [sigma, rgb, t, background] = InputRows(a, r);
  T* out_rgb = a.out_rgb + r * 3;
  T* weights = a.weights != nullptr ? a.weights + r * S : nullptr;
  const int64_t K = scratch->Walk(sigma, t, S, static_cast<T>(a.early_termination));
  const T* trans = scratch->trans.data();
  const T* alpha = scratch->alpha.data();
  T* w = scratch->w.data();
  T* w3 = scratch->w3.data();
  for (int64_t i = 0; i < K; ++i) w[i] = trans[i] * alpha[i];
  // Sums over whole packets of L samples with packet accumulators, the rest
  // scalar. For the colours, w is repeated 3x (w3[3i + c] = w_i) so the
  // interleaved rgb row is read with plain packet loads: over L samples (3 L
  // floats = 3 packets) accumulator k lane l holds channel (k L + l) mod 3.
  typedef typename RayScratch<T>::Packet Packet;
  constexpr int64_t L = RayScratch<T>::kLanes;
  using namespace Eigen::internal;  // NOLINT
  const int64_t Kv = (K / L) * L;
  Packet p_op = pset1<Packet>(T(0)), p_dp = pset1<Packet>(T(0));
  Packet p_c[3] = {pset1<Packet>(T(0)), pset1<Packet>(T(0)), pset1<Packet>(T(0))};
  const Packet half = pset1<Packet>(T(0.5));
  for (int64_t i = 0; i < Kv; ++i) {
    w3[3 * i + 0] = w[i];
    w3[3 * i + 1] = w[i];
    w3[3 * i + 2] = w[i];
  }
  for (int64_t j = 0; j < Kv; j += L) {
    const Packet p_w = ploadu<Packet>(w + j);
    p_op = padd(p_op, p_w);
    // mid = (t[i] + t[i+1]) / 2 as in vr_mid, on a packet.
    const Packet p_mid = pmul(half, padd(ploadu<Packet>(t + j), ploadu<Packet>(t + j + 1)));
    p_dp = pmadd(p_w, p_mid, p_dp);
    for (int k = 0; k < 3; ++k) {
      p_c[k] = pmadd(ploadu<Packet>(w3 + 3 * j + k * L), ploadu<Packet>(rgb + 3 * j + k * L), p_c[k]);
    }
  }
  T opacity = predux(p_op), depth = predux(p_dp);
  T colour[3] = {T(0), T(0), T(0)};
  for (int k = 0; k < 3; ++k) {
    T lanes[L];
    pstoreu(lanes, p_c[k]);
    for (int64_t l = 0; l < L; ++l) colour[(k * L + l) % 3] += lanes[l];
  }
  for (int64_t i = Kv; i < K; ++i) {
    colour[0] += w[i] * rgb[3 * i + 0];
    colour[1] += w[i] * rgb[3 * i + 1];
    colour[2] += w[i] * rgb[3 * i + 2];
    depth += w[i] * mo::vr_mid(t[i], t[i + 1]);
    opacity += w[i];
  }
  if (weights != nullptr) {
    for (int64_t k = 0; k < K; ++k) weights[k] = w[k];
    for (int64_t k = K; k < S; ++k) weights[k] = T(0);
  }
  out_rgb[0] = mo::vr_composite(colour[0], background[0], opacity);
  out_rgb[1] = mo::vr_composite(colour[1], background[1], opacity);
  out_rgb[2] = mo::vr_composite(colour[2], background[2], opacity);
  a.depth[r] = depth;
  a.opacity[r] = opacity;
}

// Backward of ray r (its rows as vr_backward_ray takes them); a.weights and
// a.grad_weights are both nullptr unless the weights output is differentiated.
template <typename T>
void BackwardRay(RayScratch<T>* scratch, const VolumeRenderBackwardArgs<T>& a, int64_t r) {
  const int64_t S = a.samples;
  const auto [sigma, rgb, t, background] = InputRows(a, r);
  const T* out_rgb = a.out_rgb + r * 3;
  const T out_depth = a.depth[r], out_opacity = a.opacity[r];
  const T* grad_rgb = a.grad_rgb + r * 3;
  const T grad_depth = a.grad_depth[r], grad_opacity = a.grad_opacity[r];
  const bool has_weight_grad = a.weights != nullptr;
  const T* weights = has_weight_grad ? a.weights + r * S : nullptr;
  const T* grad_weights = has_weight_grad ? a.grad_weights + r * S : nullptr;
  T* grad_sigma = a.grad_sigma + r * S;
  T* grad_samples_rgb = a.grad_samples_rgb + r * S * 3;
  const T gr = grad_rgb[0], gg = grad_rgb[1], gb = grad_rgb[2];
  T total = mo::vr_grad_total(grad_rgb, out_rgb, background, grad_opacity, out_opacity, grad_depth, out_depth);
  if (has_weight_grad) {
    for (int64_t i = 0; i < S; ++i) total += grad_weights[i] * weights[i];
  }
  const T g_const = mo::vr_weight_grad_const(grad_rgb, background, grad_opacity);
  const int64_t K = scratch->Walk(sigma, t, S, static_cast<T>(a.early_termination));
  const T* trans = scratch->trans.data();
  const T* alpha = scratch->alpha.data();
  T* g = scratch->g.data();
  T* gw = scratch->gw.data();
  T* gw_before = scratch->gw_before.data();
  // 1. g_i, g_i w_i and the colour gradients: simple loops without
  // loop-carried dependencies, which the compiler vectorises.
  T* w = scratch->w.data();
  for (int64_t i = 0; i < K; ++i) {
    g[i] = mo::vr_weight_grad(gr, gg, gb, rgb[3 * i + 0], rgb[3 * i + 1], rgb[3 * i + 2], g_const, grad_depth,
                              mo::vr_mid(t[i], t[i + 1]));
  }
  if (has_weight_grad) {
    for (int64_t i = 0; i < K; ++i) g[i] += grad_weights[i];
  }
  for (int64_t i = 0; i < K; ++i) {
    w[i] = trans[i] * alpha[i];
    gw[i] = g[i] * w[i];
  }
  for (int64_t i = 0; i < K; ++i) {
    grad_samples_rgb[3 * i + 0] = gr * w[i];
    grad_samples_rgb[3 * i + 1] = gg * w[i];
    grad_samples_rgb[3 * i + 2] = gb * w[i];
  }
  // 2. sum_{j<i} g_j w_j; the suffix sum_{j>i} is G minus that minus g_i w_i.
  ExclusivePrefixSum(gw, gw_before, K);
  // 3. the density gradients.
  for (int64_t i = 0; i < K; ++i) {
    grad_sigma[i] =
        mo::vr_sigma_grad(mo::vr_delta(t[i], t[i + 1]), g[i], trans[i + 1], total - (gw_before[i] + gw[i]));
  }
  for (int64_t i = K; i < S; ++i) grad_sigma[i] = T(0);
  for (int64_t i = 3 * K; i < 3 * S; ++i) grad_samples_rgb[i] = T(0);
  mo::vr_background_grad(grad_rgb, out_opacity, a.grad_background + r * 3);
}

}  // namespace volume_render_cpu
}  // namespace mo

#endif  // MO_CPU_BODIES

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels, once for every C++-API device (one kernel class
// templated on the device, a functor per device: volume_render_cpu.cc,
// volume_render_cuda.cc). The class reads the attributes, runs the checks and
// allocates the outputs (kernels/framework/render_op.h); the functor does the
// work. Compiled where TensorFlow's headers are: the file defines
// MO_TF_KERNEL before the include, after kernels/framework/render_op.h.
namespace mo {

// The checks of the inputs both directions take first (sigma, rgb, t,
// background), for `op`, and their ray shapes.
inline absl::Status CheckRenderInputs(::tensorflow::OpKernelContext* ctx, const char* op,
                                      volume_render::RayShapes* shapes) {
  using checks::DimsOf;
  return checks::ToStatus(volume_render::InputShapes(op, DimsOf(ctx->input(0)), DimsOf(ctx->input(1)),
                                                     DimsOf(ctx->input(2)), DimsOf(ctx->input(3)), shapes));
}

// Defined per device. Forward returns the op's error for the first invalid ray
// (volume_render::BadRay), Backward a launch failure; rays > 0.
template <typename Device, typename T>
struct VolumeRenderFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const VolumeRenderForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const VolumeRenderBackwardArgs<T>& args);
};

template <typename Device, typename T>
class VolumeRenderOp : public OpKernelWithAttrs<volume_render::Attrs> {
 public:
  using OpKernelWithAttrs<volume_render::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckRenderInputs(ctx, volume_render::kForward, &shapes));
    const int64_t R = shapes.rays, S = shapes.samples;
    auto data = [&](int i) { return ctx->input(i).flat<T>().data(); };
    VolumeRenderForwardArgs<T> args = {
        {R, S, shapes.background_per_ray, attrs_.early_termination, data(0), data(1), data(3), attrs_.validate},
        {data(2)},
        {}};
    OP_REQUIRES_OK(ctx, AllocateRenderOutputs<T>(ctx, R, attrs_.return_weights, TensorShape({R, S}),
                                                 TensorShape({R, 0}), &args));
    if (R == 0) return;
    OP_REQUIRES_OK(ctx, (VolumeRenderFunctor<Device, T>::Forward(ctx, args)));
  }
};

template <typename Device, typename T>
class VolumeRenderGradOp : public OpKernelWithAttrs<volume_render::GradAttrs> {
 public:
  using OpKernelWithAttrs<volume_render::GradAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const char* op = volume_render::kBackward;
    volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckRenderInputs(ctx, op, &shapes));
    bool has_weight_grad = false;
    auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
    OP_REQUIRES_OK(ctx, checks::ToStatus(volume_render::GradInputShapes(op, shapes, dims(4), dims(5), dims(6), dims(7),
                                                                        dims(8), dims(9), dims(10), dims(11),
                                                                        &has_weight_grad)));
    const int64_t R = shapes.rays;
    auto data = [&](int i) { return ctx->input(i).flat<T>().data(); };
    VolumeRenderBackwardArgs<T> args = {
        {R, shapes.samples, shapes.background_per_ray, attrs_.early_termination, data(0), data(1), data(3),
         attrs_.validate},
        {data(2)},
        {}};
    OP_REQUIRES_OK(ctx, AllocateRenderGrads<T>(ctx, 4, R, has_weight_grad, &args));
    if (R == 0) return;
    OP_REQUIRES_OK(ctx, (VolumeRenderFunctor<Device, T>::Backward(ctx, args)));
  }
};

}  // namespace mo
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_H_
