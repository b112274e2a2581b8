// MetalOpsVolumeRender / MetalOpsVolumeRenderGrad as TensorFlow GPU kernels
// (C++ API). Compiled only when the installed TensorFlow is a CUDA build: the
// Makefile then defines GOOGLE_CUDA and links kernels/cuda/volume_render.cu.cc.
// Not run here (tensorflow-cpu); the launchers are tested through the harness.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include <cstdint>
#include <vector>

#include "kernels/common/volume_render.h"
#include "kernels/cuda/volume_render.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace metal_ops {
namespace {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

// Same shape rules and messages as the CPU kernels (kernels/cpu/volume_render_kernels.cc).
void CheckInputShapes(OpKernelContext* ctx, const char* op, const Tensor& sigma, const Tensor& rgb,
                      const Tensor& t, const Tensor& background, int64_t* rays, int64_t* samples,
                      bool* background_per_ray) {
  OP_REQUIRES(ctx, sigma.dims() == 2,
              errors::InvalidArgument(op, ": 'sigma' must be [R, S] (rank 2), got shape ",
                                      sigma.shape().DebugString()));
  *rays = sigma.dim_size(0);
  *samples = sigma.dim_size(1);
  const int64_t R = *rays, S = *samples;
  OP_REQUIRES(ctx, rgb.dims() == 3 && rgb.dim_size(0) == R && rgb.dim_size(1) == S && rgb.dim_size(2) == 3,
              errors::InvalidArgument(op, ": 'rgb' must be [R, S, 3] = [", R, ", ", S,
                                      ", 3] to match 'sigma' ", sigma.shape().DebugString(), ", got shape ",
                                      rgb.shape().DebugString()));
  OP_REQUIRES(ctx, t.dims() == 2 && t.dim_size(0) == R && t.dim_size(1) == S + 1,
              errors::InvalidArgument(op, ": 't' must be [R, S + 1] = [", R, ", ", S + 1,
                                      "] (interval boundaries) to match 'sigma' ",
                                      sigma.shape().DebugString(), ", got shape ", t.shape().DebugString()));
  const bool shared = background.dims() == 1 && background.dim_size(0) == 3;
  const bool per_ray = background.dims() == 2 && background.dim_size(0) == R && background.dim_size(1) == 3;
  OP_REQUIRES(ctx, shared || per_ray,
              errors::InvalidArgument(op, ": 'background' must be [3] or [R, 3] = [", R, ", 3], got shape ",
                                      background.shape().DebugString()));
  *background_per_ray = per_ray;
}

template <typename T>
class VolumeRenderGpuOp : public OpKernel {
 public:
  explicit VolumeRenderGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("early_termination", &early_termination_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("return_weights", &return_weights_));
    OP_REQUIRES(ctx, early_termination_ >= 0.0f && early_termination_ <= 1.0f,
                errors::InvalidArgument("MetalOpsVolumeRender: 'early_termination' must be in [0, 1], got ",
                                        early_termination_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& sigma = ctx->input(0);
    const Tensor& rgb = ctx->input(1);
    const Tensor& t = ctx->input(2);
    const Tensor& background = ctx->input(3);
    int64_t R = 0, S = 0;
    bool bg_per_ray = false;
    CheckInputShapes(ctx, "MetalOpsVolumeRender", sigma, rgb, t, background, &R, &S, &bg_per_ray);
    if (!ctx->status().ok()) return;
    Tensor *out_rgb = nullptr, *depth = nullptr, *opacity = nullptr, *weights = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({R, 3}), &out_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({R}), &depth));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R}), &opacity));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({R, return_weights_ ? S : 0}), &weights));
    if (R == 0) return;

    // Two device words record the first invalid ray (sigma, t); read back once.
    Tensor bad_tensor;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_INT64, TensorShape({2}), &bad_tensor));
    auto* bad = reinterpret_cast<unsigned long long*>(bad_tensor.flat<int64_t>().data());
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    cudaError_t err = cudaMemsetAsync(bad, 0xFF, 2 * sizeof(unsigned long long), stream);
    if (err == cudaSuccess) {
      err = mo::cuda::LaunchVolumeRenderForward<T>(
          sigma.flat<T>().data(), rgb.flat<T>().data(), t.flat<T>().data(), background.flat<T>().data(),
          bg_per_ray, R, S, early_termination_, out_rgb->flat<T>().data(), depth->flat<T>().data(),
          opacity->flat<T>().data(), return_weights_ ? weights->flat<T>().data() : nullptr, bad, stream);
    }
    unsigned long long host_bad[2] = {0, 0};
    if (err == cudaSuccess) err = cudaMemcpyAsync(host_bad, bad, sizeof(host_bad), cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("MetalOpsVolumeRender CUDA launch failed: ", cudaGetErrorString(err)));
    for (int which = 0; which < 2; ++which) {
      if (host_bad[which] == ~0ull) continue;
      const int64_t r = static_cast<int64_t>(host_bad[which]);
      std::vector<T> sigma_row(S), t_row(S + 1);
      cudaMemcpy(sigma_row.data(), sigma.flat<T>().data() + r * S, S * sizeof(T), cudaMemcpyDeviceToHost);
      cudaMemcpy(t_row.data(), t.flat<T>().data() + r * (S + 1), (S + 1) * sizeof(T), cudaMemcpyDeviceToHost);
      const mo::VrCheck check = mo::vr_check_ray(sigma_row.data(), t_row.data(), S);
      const int64_t i = check.sample;
      if (check.code == mo::kVrBadSigma) {
        ctx->SetStatus(errors::InvalidArgument("MetalOpsVolumeRender: 'sigma' must be non-negative (and not NaN): ray ",
                                               r, ", sample ", i, " has sigma = ",
                                               static_cast<double>(sigma_row[i])));
      } else {
        ctx->SetStatus(errors::InvalidArgument("MetalOpsVolumeRender: 't' must be non-decreasing along each ray: ray ",
                                               r, " has t[", i + 1, "] = ", static_cast<double>(t_row[i + 1]),
                                               " < t[", i, "] = ", static_cast<double>(t_row[i])));
      }
      return;
    }
  }

 private:
  float early_termination_ = 1e-4f;
  bool return_weights_ = false;
};

template <typename T>
class VolumeRenderGradGpuOp : public OpKernel {
 public:
  explicit VolumeRenderGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("early_termination", &early_termination_));
    OP_REQUIRES(ctx, early_termination_ >= 0.0f && early_termination_ <= 1.0f,
                errors::InvalidArgument("MetalOpsVolumeRenderGrad: 'early_termination' must be in [0, 1], got ",
                                        early_termination_));
  }

  void Compute(OpKernelContext* ctx) override {
    const char* op = "MetalOpsVolumeRenderGrad";
    const Tensor& sigma = ctx->input(0);
    const Tensor& rgb = ctx->input(1);
    const Tensor& t = ctx->input(2);
    const Tensor& background = ctx->input(3);
    const Tensor& out_rgb = ctx->input(4);
    const Tensor& depth = ctx->input(5);
    const Tensor& opacity = ctx->input(6);
    const Tensor& weights = ctx->input(7);
    const Tensor& grad_rgb = ctx->input(8);
    const Tensor& grad_depth = ctx->input(9);
    const Tensor& grad_opacity = ctx->input(10);
    const Tensor& grad_weights = ctx->input(11);
    int64_t R = 0, S = 0;
    bool bg_per_ray = false;
    CheckInputShapes(ctx, op, sigma, rgb, t, background, &R, &S, &bg_per_ray);
    if (!ctx->status().ok()) return;
    const TensorShape ray3({R, 3}), ray({R});
    OP_REQUIRES(ctx, out_rgb.shape() == ray3 && grad_rgb.shape() == ray3,
                errors::InvalidArgument(op, ": 'out_rgb' and 'grad_rgb' must be [R, 3] = ", ray3.DebugString()));
    OP_REQUIRES(ctx, depth.shape() == ray && opacity.shape() == ray && grad_depth.shape() == ray &&
                         grad_opacity.shape() == ray,
                errors::InvalidArgument(op, ": 'depth', 'opacity', 'grad_depth' and 'grad_opacity' must be [R] = ",
                                        ray.DebugString()));
    const bool weights_full = weights.dims() == 2 && weights.dim_size(0) == R && weights.dim_size(1) == S;
    const bool weights_none = weights.dims() == 2 && weights.dim_size(0) == R && weights.dim_size(1) == 0;
    OP_REQUIRES(ctx, (weights_full || weights_none) && grad_weights.shape() == weights.shape(),
                errors::InvalidArgument(op, ": 'weights' and 'grad_weights' must both be [R, S] = [", R, ", ", S,
                                        "] or [R, 0]"));
    const bool has_weight_grad = weights_full && S > 0;
    Tensor *grad_sigma = nullptr, *grad_samples_rgb = nullptr, *grad_background = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, sigma.shape(), &grad_sigma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, rgb.shape(), &grad_samples_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, ray3, &grad_background));
    if (R == 0) return;
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    const cudaError_t err = mo::cuda::LaunchVolumeRenderBackward<T>(
        sigma.flat<T>().data(), rgb.flat<T>().data(), t.flat<T>().data(), background.flat<T>().data(), bg_per_ray,
        R, S, early_termination_, out_rgb.flat<T>().data(), depth.flat<T>().data(), opacity.flat<T>().data(),
        has_weight_grad ? weights.flat<T>().data() : nullptr, grad_rgb.flat<T>().data(),
        grad_depth.flat<T>().data(), grad_opacity.flat<T>().data(),
        has_weight_grad ? grad_weights.flat<T>().data() : nullptr, grad_sigma->flat<T>().data(),
        grad_samples_rgb->flat<T>().data(), grad_background->flat<T>().data(), stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("MetalOpsVolumeRenderGrad CUDA launch failed: ", cudaGetErrorString(err)));
  }

 private:
  float early_termination_ = 1e-4f;
};

#define METAL_OPS_REGISTER_VOLUME_RENDER_GPU(T)                                                         \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsVolumeRender").Device(DEVICE_GPU).TypeConstraint<T>("T"),     \
                          VolumeRenderGpuOp<T>);                                                      \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsVolumeRenderGrad").Device(DEVICE_GPU).TypeConstraint<T>("T"), \
                          VolumeRenderGradGpuOp<T>)
METAL_OPS_REGISTER_VOLUME_RENDER_GPU(float);
METAL_OPS_REGISTER_VOLUME_RENDER_GPU(double);
#undef METAL_OPS_REGISTER_VOLUME_RENDER_GPU

}  // namespace
}  // namespace metal_ops

#endif  // GOOGLE_CUDA
