// DistortionLoss as TensorFlow GPU kernels (C++ API). Compiled only when the
// installed TensorFlow is a CUDA build; here it is syntax-checked by
// `make cuda-check`. Launchers: kernels/cuda/distortion_loss.cu.cc.
//
// Unsorted t is reported with the CPU kernel's InvalidArgument
// (ops/distortion_loss_validation.h): a check kernel finds the first bad ray on
// the device, one 8-byte copy to the host (a stream synchronisation per call)
// reads it back, and only on failure that ray's t row is copied for the message.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include <vector>

#include "kernels/cuda/distortion_loss.h"
#include "ops/distortion_loss_validation.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace metal_ops {
namespace {

using ::tensorflow::DT_INT64;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

// InvalidArgument naming the first ray whose t decreases.
Status CheckSorted(OpKernelContext* ctx, const Tensor& t, int64_t rays, int64_t samples, cudaStream_t stream) {
  Tensor first_bad;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_INT64, TensorShape({1}), &first_bad));
  auto* dev = reinterpret_cast<unsigned long long*>(first_bad.flat<int64_t>().data());
  cudaError_t err = mo::cuda::LaunchDistortionLossCheck(t.flat<float>().data(), rays, samples, dev, stream);
  unsigned long long host = 0;
  if (err == cudaSuccess) err = cudaMemcpyAsync(&host, dev, sizeof(host), cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return errors::Internal("DistortionLoss CUDA check failed: ", cudaGetErrorString(err));
  if (host >= static_cast<unsigned long long>(rays)) return Status();
  // The bad ray's boundaries, on the host, for the same message as the CPU kernel.
  const int64_t r = static_cast<int64_t>(host);
  std::vector<float> row(samples + 1);
  err = cudaMemcpy(row.data(), t.flat<float>().data() + r * (samples + 1), row.size() * sizeof(float),
                   cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return errors::Internal("DistortionLoss CUDA check failed: ", cudaGetErrorString(err));
  return distortion_loss::CheckRaySorted(row.data(), r, samples);
}

class DistortionLossGpuOp : public OpKernel {
 public:
  explicit DistortionLossGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& w = ctx->input(0);
    const Tensor& t = ctx->input(1);
    OP_REQUIRES_OK(ctx, distortion_loss::CheckShapes(w, t));
    const int64_t rays = w.dim_size(0), samples = w.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rays}), &out));
    if (rays == 0) return;
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    OP_REQUIRES_OK(ctx, CheckSorted(ctx, t, rays, samples, stream));
    const cudaError_t err = mo::cuda::LaunchDistortionLossForward(
        w.flat<float>().data(), t.flat<float>().data(), out->flat<float>().data(), rays, samples, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("DistortionLoss CUDA launch failed: ", cudaGetErrorString(err)));
  }
};

class DistortionLossGradGpuOp : public OpKernel {
 public:
  explicit DistortionLossGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& t = ctx->input(2);
    OP_REQUIRES_OK(ctx, distortion_loss::CheckShapes(w, t));
    const int64_t rays = w.dim_size(0), samples = w.dim_size(1);
    OP_REQUIRES_OK(ctx, distortion_loss::CheckGradShape(g, rays));
    Tensor *gw = nullptr, *gt = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, w.shape(), &gw));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, t.shape(), &gt));
    if (rays == 0) return;
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    OP_REQUIRES_OK(ctx, CheckSorted(ctx, t, rays, samples, stream));
    const cudaError_t err = mo::cuda::LaunchDistortionLossBackward(
        g.flat<float>().data(), w.flat<float>().data(), t.flat<float>().data(), gw->flat<float>().data(),
        gt->flat<float>().data(), rays, samples, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("DistortionLossGrad CUDA launch failed: ", cudaGetErrorString(err)));
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_GPU), DistortionLossGpuOp);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_GPU),
                        DistortionLossGradGpuOp);

}  // namespace
}  // namespace metal_ops

#endif  // GOOGLE_CUDA
