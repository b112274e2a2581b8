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
#include "ops/volume_render_validation.h"
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

template <typename T>
class VolumeRenderGpuOp : public OpKernel {
 public:
  explicit VolumeRenderGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, volume_render::ReadAttrs(ctx, "MetalOpsVolumeRender", &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& sigma = ctx->input(0);
    const Tensor& rgb = ctx->input(1);
    const Tensor& t = ctx->input(2);
    const Tensor& background = ctx->input(3);
    volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, volume_render::CheckInputShapes("MetalOpsVolumeRender", sigma, rgb, t, background, &shapes));
    const int64_t R = shapes.rays, S = shapes.samples;
    const bool bg_per_ray = shapes.background_per_ray;
    Tensor *out_rgb = nullptr, *depth = nullptr, *opacity = nullptr, *weights = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({R, 3}), &out_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({R}), &depth));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R}), &opacity));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({R, attrs_.return_weights ? S : 0}), &weights));
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
          bg_per_ray, R, S, attrs_.early_termination, out_rgb->flat<T>().data(), depth->flat<T>().data(),
          opacity->flat<T>().data(), attrs_.return_weights ? weights->flat<T>().data() : nullptr, bad, stream);
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
      ctx->SetStatus(volume_render::BadRayError(check, r, sigma_row.data(), t_row.data()));
      return;
    }
  }

 private:
  volume_render::Attrs attrs_;
};

template <typename T>
class VolumeRenderGradGpuOp : public OpKernel {
 public:
  explicit VolumeRenderGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, volume_render::ReadAttrs(ctx, "MetalOpsVolumeRenderGrad", &attrs_));
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
    volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, volume_render::CheckInputShapes(op, sigma, rgb, t, background, &shapes));
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, volume_render::CheckGradInputShapes(op, shapes, out_rgb, depth, opacity, weights, grad_rgb,
                                                            grad_depth, grad_opacity, grad_weights,
                                                            &has_weight_grad));
    const int64_t R = shapes.rays, S = shapes.samples;
    const bool bg_per_ray = shapes.background_per_ray;
    Tensor *grad_sigma = nullptr, *grad_samples_rgb = nullptr, *grad_background = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, sigma.shape(), &grad_sigma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, rgb.shape(), &grad_samples_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R, 3}), &grad_background));
    if (R == 0) return;
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    const cudaError_t err = mo::cuda::LaunchVolumeRenderBackward<T>(
        sigma.flat<T>().data(), rgb.flat<T>().data(), t.flat<T>().data(), background.flat<T>().data(), bg_per_ray,
        R, S, attrs_.early_termination, out_rgb.flat<T>().data(), depth.flat<T>().data(), opacity.flat<T>().data(),
        has_weight_grad ? weights.flat<T>().data() : nullptr, grad_rgb.flat<T>().data(),
        grad_depth.flat<T>().data(), grad_opacity.flat<T>().data(),
        has_weight_grad ? grad_weights.flat<T>().data() : nullptr, grad_sigma->flat<T>().data(),
        grad_samples_rgb->flat<T>().data(), grad_background->flat<T>().data(), stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("MetalOpsVolumeRenderGrad CUDA launch failed: ", cudaGetErrorString(err)));
  }

 private:
  volume_render::Attrs attrs_;
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
