// The TensorFlow kernels of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad,
// once for every C++-API device (one kernel class templated on the device, a
// functor per device): the checks of kernels/distortion_loss/distortion_loss_spec.h and the
// output allocation here; DistortionLossFunctor<Device> does the work:
//   CPU  kernels/distortion_loss/distortion_loss_kernels.cc (registers DistortionLossOp<CPUDevice>)
//   CUDA kernels/distortion_loss/distortion_loss_gpu.cc    (registers DistortionLossOp<GPUDevice>)
#ifndef MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_KERNEL_H_
#define MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_KERNEL_H_

#include <cstdint>

#include "kernels/spec/checks_tf.h"
#include "kernels/distortion_loss/distortion_loss_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

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

template <typename Device>
class DistortionLossOp : public ::tensorflow::OpKernel {
 public:
  explicit DistortionLossOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    int64_t rays = 0, samples = 0;
    OP_REQUIRES_OK(ctx, distortion_loss::CheckedSizes(ctx, 0, &rays, &samples));
    ::tensorflow::Tensor* loss = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({rays}), &loss));
    if (rays == 0) return;
    OP_REQUIRES_OK(ctx, DistortionLossFunctor<Device>::Forward(ctx, ctx->input(0).flat<float>().data(),
                                                               ctx->input(1).flat<float>().data(), rays, samples,
                                                               loss->flat<float>().data()));
  }
};

template <typename Device>
class DistortionLossGradOp : public ::tensorflow::OpKernel {
 public:
  explicit DistortionLossGradOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    int64_t rays = 0, samples = 0;
    OP_REQUIRES_OK(ctx, distortion_loss::CheckedSizes(ctx, 1, &rays, &samples));
    const ::tensorflow::Tensor& g = ctx->input(0);
    const ::tensorflow::Tensor& w = ctx->input(1);
    const ::tensorflow::Tensor& t = ctx->input(2);
    OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::GradShape(checks::DimsOf(g), rays)));
    ::tensorflow::Tensor *gw = nullptr, *gt = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, w.shape(), &gw));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, t.shape(), &gt));
    if (rays == 0) return;
    OP_REQUIRES_OK(ctx, DistortionLossFunctor<Device>::Backward(
                            ctx, g.flat<float>().data(), w.flat<float>().data(), t.flat<float>().data(), rays,
                            samples, gw->flat<float>().data(), gt->flat<float>().data()));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_DISTORTION_LOSS_DISTORTION_LOSS_KERNEL_H_
