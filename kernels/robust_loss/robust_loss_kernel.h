// The TensorFlow kernels of MetalOpsRobustLoss / MetalOpsRobustLossGrad, once
// for every C++-API device (one kernel class templated on the device and the
// dtype, a functor per device, TF's pattern): the checks of
// kernels/robust_loss/robust_loss_spec.h and the output allocation here;
// RobustLossFunctor<Device, T> does the work:
//   CPU  kernels/robust_loss/robust_loss_kernels.cc (the functor; registers RobustLossOp<CPUDevice, T>)
//   CUDA kernels/robust_loss/robust_loss_gpu.cc    (the functor; registers RobustLossOp<GPUDevice, T>)
#ifndef MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_KERNEL_H_
#define MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_KERNEL_H_

#include <cstdint>

#include "kernels/spec/checks_tf.h"
#include "kernels/robust_loss/robust_loss_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// The inputs of one call: x (and grad) of n elements of T; alpha and scale
// float, one element or one per channel as `layout` says.
template <typename T>
struct RobustLossArgs {
  int64_t n;
  robust_loss::ParamLayout layout;
  const T* x;
  const float* alpha;
  const float* scale;
};

// Defined per device. The outputs may share their buffer with x (forward) or
// grad (backward): element i is read before it is written.
template <typename Device, typename T>
struct RobustLossFunctor {
  // The checks of alpha's and scale's values where the device reads them (they
  // live in the device's memory).
  static absl::Status CheckParamValues(const RobustLossArgs<T>& args);
  // out[i] = rho(x[i]); n > 0.
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, T* out);
  // dx[i] = grad[i] * drho/dx; dalpha / dscale (as many elements as alpha /
  // scale) get the sums of grad * drho/dalpha and grad * drho/dscale, zeros
  // when n = 0.
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const RobustLossArgs<T>& args, const T* grad,
                               T* dx, float* dalpha, float* dscale);
};

namespace robust_loss {

// x, alpha and scale (inputs `first` to first + 2): the shapes of alpha and
// scale against x and, where the device reads them, their values.
template <typename Device, typename T>
absl::Status CheckedArgs(::tensorflow::OpKernelContext* ctx, int first, RobustLossArgs<T>* args) {
  const ::tensorflow::Tensor& x = ctx->input(first);
  const ::tensorflow::Tensor& alpha = ctx->input(first + 1);
  const ::tensorflow::Tensor& scale = ctx->input(first + 2);
  TF_RETURN_IF_ERROR(checks::ToStatus(
      robust_loss::ParamShapes(checks::DimsOf(x), checks::DimsOf(alpha), checks::DimsOf(scale), &args->layout)));
  args->n = x.NumElements();
  args->x = x.flat<T>().data();
  args->alpha = alpha.flat<float>().data();
  args->scale = scale.flat<float>().data();
  return RobustLossFunctor<Device, T>::CheckParamValues(*args);
}

}  // namespace robust_loss

template <typename Device, typename T>
class RobustLossOp : public ::tensorflow::OpKernel {
 public:
  explicit RobustLossOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    RobustLossArgs<T> args;
    OP_REQUIRES_OK(ctx, robust_loss::CheckedArgs<Device, T>(ctx, 0, &args));
    ::tensorflow::Tensor* out = nullptr;
    // The loss may take x's buffer (elementwise) when nothing else needs x.
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, ctx->input(0).shape(), &out));
    if (args.n == 0) return;
    OP_REQUIRES_OK(ctx, (RobustLossFunctor<Device, T>::Forward(ctx, args, out->flat<T>().data())));
  }
};

template <typename Device, typename T>
class RobustLossGradOp : public ::tensorflow::OpKernel {
 public:
  explicit RobustLossGradOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& grad = ctx->input(0);
    const ::tensorflow::Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, checks::ToStatus(robust_loss::GradShape(checks::DimsOf(grad), checks::DimsOf(x))));
    RobustLossArgs<T> args;
    OP_REQUIRES_OK(ctx, robust_loss::CheckedArgs<Device, T>(ctx, 1, &args));
    ::tensorflow::Tensor *dx = nullptr, *dalpha = nullptr, *dscale = nullptr;
    // grad_x may take grad's buffer (elementwise; TF forwards only when no one
    // else holds grad): no fresh allocation to fault in.
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ctx->input(2).shape(), &dalpha));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, ctx->input(3).shape(), &dscale));
    OP_REQUIRES_OK(ctx, (RobustLossFunctor<Device, T>::Backward(ctx, args, grad.flat<T>().data(), dx->flat<T>().data(),
                                                                dalpha->flat<float>().data(),
                                                                dscale->flat<float>().data())));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_ROBUST_LOSS_ROBUST_LOSS_KERNEL_H_
