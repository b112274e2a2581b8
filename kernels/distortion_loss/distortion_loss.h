// mip-NeRF 360's distortion loss in the O(S) prefix-sum form of DVGOv2
// (arXiv 2206.05085). This header is the op's one description shared by every
// backend: the formulas (written once for the CPU kernels, CUDA, the Metal
// shaders and the MSL shim), the op's declaration (no attribute:
// MO_DISTORTION_LOSS_ATTRS is empty) and, in host code, the checks, the Metal
// plans' and CUDA launchers' signatures and the TensorFlow kernel classes.
// The op's files (docs/ADDING_AN_OP.md):
//   distortion_loss_op.cc     REGISTER_OP                 distortion_loss_cpu.cc    CPU kernels, XLA host handlers
//   distortion_loss.cu.cc     CUDA kernels, launchers     distortion_loss_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   distortion_loss.metal     Metal shaders               distortion_loss_metal.cc  Metal plans, tensorflow-metal glue
//   distortion_loss_xla.cc    XLA op kernels
//
// For one ray with weights w[0..S) and sorted interval edges t[0..S]:
//   m_i = (t_i + t_{i+1}) / 2,  d_i = t_{i+1} - t_i
//   L = sum_{i,j} w_i w_j |m_i - m_j| + 1/3 sum_i w_i^2 d_i
//     = sum_i [ 2 w_i (m_i W_{<i} - (wm)_{<i}) + 1/3 w_i^2 d_i ]
//   dL/dw_i = 2/3 w_i d_i + 2 [m_i (W_{<i} - W_{>i}) + (wm)_{>i} - (wm)_{<i}]
//   dL/dm_i = 2 w_i (W_{<i} - W_{>i}),  dL/dd_i = w_i^2 / 3
//   dL/dt_k = (dL/dm_{k-1} + dL/dm_k) / 2 + dL/dd_{k-1} - dL/dd_k
// (terms with an index outside [0, S) are zero). W and (wm) are prefix /
// suffix sums of w and w*m. Midpoints are taken relative to t_0 (L does not
// change under a shift of t), which keeps m W - (wm) free of cancellation
// when t is far from 0. Ties m_i = m_j count j < i as "below" (a subgradient).
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_H_

#include "kernels/common/platform.h"

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
struct DistortionLossParams {
  int64 num_rays;     // R
  int64 num_samples;  // S: weights are [R, S], t is [R, S + 1]
};

// The shaders' buffer indices (distortion_loss.metal, the plans of distortion_loss_metal.cc).
enum DistortionLossBuffers {
  kDistortionLossW = 0,       // forward: weights
  kDistortionLossT = 1,       // forward: t
  kDistortionLossLoss = 2,    // forward: loss
  kDistortionLossParams = 3,  // forward: DistortionLossParams
  kDistortionLossGradGrad = 0,
  kDistortionLossGradW = 1,
  kDistortionLossGradT = 2,
  kDistortionLossGradDw = 3,
  kDistortionLossGradDt = 4,
  kDistortionLossGradParams = 5,
};

// Midpoint of interval [t0, t1] relative to the ray's origin t_first.
MO_FN float dl_mid(float t0, float t1, float t_first) {
  return 0.5f * ((t0 - t_first) + (t1 - t_first));
}

// Contribution of sample i to L, given the exclusive prefix sums W_{<i}, (wm)_{<i}.
MO_FN float dl_sample_loss(float w, float m, float d, float w_below, float wm_below) {
  return 2.0f * w * (m * w_below - wm_below) + (1.0f / 3.0f) * w * w * d;
}

// dL/dw_i from the prefix (below) and suffix (above) sums.
MO_FN float dl_sample_grad_w(float w, float m, float d, float w_below, float wm_below,
                             float w_above, float wm_above) {
  return (2.0f / 3.0f) * w * d + 2.0f * (m * (w_below - w_above) + wm_above - wm_below);
}

// dL/dm_i and dL/dd_i.
MO_FN float dl_sample_grad_m(float w, float w_below, float w_above) {
  return 2.0f * w * (w_below - w_above);
}
MO_FN float dl_sample_grad_d(float w) { return (1.0f / 3.0f) * w * w; }

// dL/dt_k from dL/dm and dL/dd of the intervals on its left (k-1) and right (k).
MO_FN float dl_grad_t(float gm_left, float gd_left, float gm_right, float gd_right) {
  return 0.5f * (gm_left + gm_right) + gd_left - gd_right;
}

// Index of the first k with t[k+1] < t[k] (t not sorted), or -1.
MO_FN int64 dl_first_decrease(const MO_DEVICE float* t, int64 num_samples) {
  for (int64 k = 0; k < num_samples; ++k) {
    if (!(t[k + 1] >= t[k])) return k;  // NaN counts as a decrease
  }
  return -1;
}

// L for one ray, serially (CPU kernels and the Metal shader run one ray per
// thread; CUDA splits a ray over a warp with the same per-sample terms).
// Returns NaN when t is not sorted.
MO_FN float distortion_loss_ray(const MO_DEVICE float* w, const MO_DEVICE float* t,
                                int64 num_samples) {
  if (num_samples > 0 && dl_first_decrease(t, num_samples) >= 0) return NAN;
  float w_below = 0.0f, wm_below = 0.0f, loss = 0.0f;
  const float t_first = num_samples > 0 ? t[0] : 0.0f;
  for (int64 i = 0; i < num_samples; ++i) {
    const float wi = w[i];
    const float m = dl_mid(t[i], t[i + 1], t_first);
    const float d = t[i + 1] - t[i];
    loss += dl_sample_loss(wi, m, d, w_below, wm_below);
    w_below += wi;
    wm_below += wi * m;
  }
  return loss;
}

// g * dL/dw and g * dL/dt for one ray, serially (two passes: totals, then terms).
// Writes NaN gradients when t is not sorted.
MO_FN void distortion_loss_grad_ray(float g, const MO_DEVICE float* w, const MO_DEVICE float* t,
                                    int64 num_samples, MO_DEVICE float* grad_w,
                                    MO_DEVICE float* grad_t) {
  if (num_samples > 0 && dl_first_decrease(t, num_samples) >= 0) {
    for (int64 i = 0; i < num_samples; ++i) grad_w[i] = NAN;
    for (int64 k = 0; k <= num_samples; ++k) grad_t[k] = NAN;
    return;
  }
  if (num_samples == 0) {
    grad_t[0] = 0.0f;
    return;
  }
  const float t_first = t[0];
  float w_total = 0.0f, wm_total = 0.0f;
  for (int64 i = 0; i < num_samples; ++i) {
    w_total += w[i];
    wm_total += w[i] * dl_mid(t[i], t[i + 1], t_first);
  }
  float w_below = 0.0f, wm_below = 0.0f, gm_left = 0.0f, gd_left = 0.0f;
  for (int64 i = 0; i < num_samples; ++i) {
    const float wi = w[i];
    const float m = dl_mid(t[i], t[i + 1], t_first);
    const float d = t[i + 1] - t[i];
    const float w_above = w_total - w_below - wi;
    const float wm_above = wm_total - wm_below - wi * m;
    grad_w[i] = g * dl_sample_grad_w(wi, m, d, w_below, wm_below, w_above, wm_above);
    const float gm = dl_sample_grad_m(wi, w_below, w_above);
    const float gd = dl_sample_grad_d(wi);
    grad_t[i] = g * dl_grad_t(gm_left, gd_left, gm, gd);
    gm_left = gm;
    gd_left = gd;
    w_below += wi;
    wm_below += wi * m;
  }
  grad_t[num_samples] = g * dl_grad_t(gm_left, gd_left, 0.0f, 0.0f);
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsDistortionLoss(weights [R, S], t [R, S + 1]) -> loss [R] and
// MetalOpsDistortionLossGrad(grad [R], weights, t) -> grad_weights, grad_t,
// float32; no attribute.
#define MO_DISTORTION_LOSS_ATTRS(ATTR)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace distortion_loss {

// Attrs {} (none), ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("DistortionLoss", MO_DISTORTION_LOSS_ATTRS);

// The checks, written once for every kernel of the op: the CPU and CUDA
// kernels (the kernel classes below), XLA's op kernels and the Metal kernels
// (through KernelCall::Check). No TensorFlow API: sizes and values in,
// kernels/spec/checks.h's Result out. Messages name the argument; tests
// match on them. weights [R, S] and t [R, S + 1].
inline Result Shapes(const Dims& w, const Dims& t) {
  if (w.size() != 2) return Invalid("DistortionLoss: 'weights' must be [R, S], got shape ", ShapeString(w));
  if (t.size() != 2) return Invalid("DistortionLoss: 't' must be [R, S + 1], got shape ", ShapeString(t));
  if (t[0] != w[0] || t[1] != w[1] + 1) {
    return Invalid("DistortionLoss: 't' must be [R, S + 1] = [", w[0], ", ", w[1] + 1, "] for 'weights' of shape ",
                   ShapeString(w), ", got ", ShapeString(t));
  }
  return Ok();
}

// The upstream gradient of DistortionLossGrad: one value per ray.
inline Result GradShape(const Dims& g, int64_t rays) {
  if (g != Dims{rays}) return Invalid("DistortionLossGrad: 'grad' must be [R] = [", rays, "], got ", ShapeString(g));
  return Ok();
}

// The first decrease (NaN counts) of ray r, whose samples + 1 boundaries
// `row` points to in host memory; OK if there is none.
inline Result RaySorted(const float* row, int64_t r, int64_t samples) {
  const int64_t k = dl_first_decrease(row, samples);
  if (k >= 0) {
    return Invalid("DistortionLoss: 't' must be non-decreasing along each ray, but ray ", r, " has t[", r, ", ", k,
                   "] = ", row[k], " > t[", r, ", ", k + 1, "] = ", row[k + 1]);
  }
  return Ok();
}

}  // namespace distortion_loss
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (distortion_loss_metal.cc), every Metal path's
// (kernels/metal_plan/plan.h): float32, forward slots {weights, t, loss},
// backward {grad, weights, t, grad_weights, grad_t}; rays > 0, one thread per ray.
namespace mo::metal_plan {
enum DistortionLossSlots { kDistortionLossSlotW, kDistortionLossSlotT, kDistortionLossSlotLoss, kDistortionLossSlots };
enum DistortionLossGradSlots {
  kDistortionLossGradSlotGrad,
  kDistortionLossGradSlotW,
  kDistortionLossGradSlotT,
  kDistortionLossGradSlotDw,
  kDistortionLossGradSlotDt,
  kDistortionLossGradSlots
};
Plan DistortionLossForward(int64_t rays, int64_t samples);
Plan DistortionLossBackward(int64_t rays, int64_t samples);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launchers (distortion_loss.cu.cc), plain C++ (no TensorFlow): the
// TF GPU kernels and XLA's CUDA handlers (distortion_loss_cuda.cc) and the
// C-ABI harness (tests/cuda/distortion_loss_harness.cu.cc).
namespace mo::cuda {
// *first_bad (device) = smallest ray r whose t decreases (NaN counts), or
// UINT64_MAX when every ray is sorted.
cudaError_t LaunchDistortionLossCheck(const float* t, int64_t rays, int64_t samples,
                                      unsigned long long* first_bad, cudaStream_t stream);

// loss[r] for weights [R, S], t [R, S + 1]: one warp per ray, 32 samples per
// round with warp prefix sums (O(S) work per ray). NaN for unsorted rays.
cudaError_t LaunchDistortionLossForward(const float* weights, const float* t, float* loss,
                                        int64_t rays, int64_t samples, cudaStream_t stream);

// grad_weights = grad[r] * dL/dw, grad_t = grad[r] * dL/dt (same warp scheme).
cudaError_t LaunchDistortionLossBackward(const float* grad, const float* weights, const float* t,
                                         float* grad_weights, float* grad_t, int64_t rays,
                                         int64_t samples, cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad,
// once for every C++-API device (one kernel class templated on the device, a
// functor per device): the checks above and the output allocation here;
// DistortionLossFunctor<Device> does the work. distortion_loss_cpu.cc (the CPU
// functor) and distortion_loss_cuda.cc (the CUDA one) define MO_TF_KERNEL and
// include TensorFlow's op_kernel.h and kernels/spec/checks_tf.h before this
// header, which itself reaches no TensorFlow header.
namespace mo {

// Defined per device, for rays > 0. Each first checks that t is sorted along
// every ray (distortion_loss::RaySorted's error for the first that is not).
template <typename Device>
struct DistortionLossFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const float* w, const float* t, int64_t rays,
                              int64_t samples, float* loss);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const float* grad, const float* w, const float* t,
                               int64_t rays, int64_t samples, float* grad_w, float* grad_t);
};

namespace distortion_loss {

// The checks of w and t (inputs `first` and first + 1, as distortion_loss::Shapes
// says) and their rays and samples.
inline absl::Status CheckedSizes(::tensorflow::OpKernelContext* ctx, int first, int64_t* rays, int64_t* samples) {
  const ::tensorflow::Tensor& w = ctx->input(first);
  TF_RETURN_IF_ERROR(checks::ToStatus(Shapes(checks::DimsOf(w), checks::DimsOf(ctx->input(first + 1)))));
  *rays = w.dim_size(0);
  *samples = w.dim_size(1);
  return absl::OkStatus();
}

}  // namespace distortion_loss

// The forward (kGrad false) or the gradient op (kGrad true).
template <typename Device, bool kGrad>
class DistortionLossKernel : public ::tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    // weights and t: inputs 0 and 1 of the forward, 1 and 2 of the gradient op.
    constexpr int kW = kGrad ? 1 : 0;
    int64_t rays = 0, samples = 0;
    OP_REQUIRES_OK(ctx, distortion_loss::CheckedSizes(ctx, kW, &rays, &samples));
    const ::tensorflow::Tensor& w = ctx->input(kW);
    const ::tensorflow::Tensor& t = ctx->input(kW + 1);
    if constexpr (kGrad) {
      const ::tensorflow::Tensor& g = ctx->input(0);
      OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::GradShape(checks::DimsOf(g), rays)));
      ::tensorflow::Tensor *gw = nullptr, *gt = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, w.shape(), &gw));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, t.shape(), &gt));
      if (rays == 0) return;
      OP_REQUIRES_OK(ctx, DistortionLossFunctor<Device>::Backward(
                              ctx, g.flat<float>().data(), w.flat<float>().data(), t.flat<float>().data(), rays,
                              samples, gw->flat<float>().data(), gt->flat<float>().data()));
    } else {
      ::tensorflow::Tensor* loss = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({rays}), &loss));
      if (rays == 0) return;
      OP_REQUIRES_OK(ctx, DistortionLossFunctor<Device>::Forward(ctx, w.flat<float>().data(), t.flat<float>().data(),
                                                                 rays, samples, loss->flat<float>().data()));
    }
  }
};

}  // namespace mo

// Both ops on DEVICE (DEVICE_CPU, DEVICE_GPU), run by the kernel class above
// on DEVICE_TYPE (distortion_loss_cpu.cc, distortion_loss_cuda.cc).
#define MO_REGISTER_DISTORTION_LOSS(DEVICE, DEVICE_TYPE)                                      \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE),     \
                          ::mo::DistortionLossKernel<DEVICE_TYPE, false>);                 \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE), \
                          ::mo::DistortionLossKernel<DEVICE_TYPE, true>)
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_H_
