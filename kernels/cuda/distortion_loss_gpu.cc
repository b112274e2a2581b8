// DistortionLoss as TensorFlow GPU kernels (C++ API). Compiled only when the
// installed TensorFlow is a CUDA build; here it is syntax-checked by
// `make cuda-check`. Launchers: kernels/cuda/distortion_loss.cu.cc.
//
// Unsorted t is reported as InvalidArgument naming the first bad ray, like the
// CPU kernel: a check kernel finds it on the device and one 8-byte copy to the
// host (a stream synchronisation per call) reads it back.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/cuda/distortion_loss.h"
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

Status CheckShapes(const Tensor& w, const Tensor& t) {
  if (w.dims() != 2) {
    return errors::InvalidArgument("DistortionLoss: 'weights' must be [R, S], got shape ", w.shape().DebugString());
  }
  if (t.dims() != 2 || t.dim_size(0) != w.dim_size(0) || t.dim_size(1) != w.dim_size(1) + 1) {
    return errors::InvalidArgument("DistortionLoss: 't' must be [R, S + 1] = [", w.dim_size(0), ", ",
                                   w.dim_size(1) + 1, "], got ", t.shape().DebugString());
  }
  return Status();
}

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
  if (host < static_cast<unsigned long long>(rays)) {
    return errors::InvalidArgument("DistortionLoss: 't' must be non-decreasing along each ray, but ray ",
                                   static_cast<int64_t>(host), " decreases");
  }
  return Status();
}

class DistortionLossGpuOp : public OpKernel {
 public:
  explicit DistortionLossGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& w = ctx->input(0);
    const Tensor& t = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckShapes(w, t));
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
    OP_REQUIRES_OK(ctx, CheckShapes(w, t));
    const int64_t rays = w.dim_size(0), samples = w.dim_size(1);
    OP_REQUIRES(ctx, g.dims() == 1 && g.dim_size(0) == rays,
                errors::InvalidArgument("DistortionLossGrad: 'grad' must be [R] = [", rays, "], got ",
                                        g.shape().DebugString()));
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
