// The TensorFlow kernels of MetalOpsTruncExp / MetalOpsTruncExpGrad, once for
// every C++-API device (one kernel class templated on the device, a functor
// per device): the checks of kernels/spec/trunc_exp_spec.h and the output
// allocation here; TruncExpFunctor<Device, T> does the work:
//   CPU  kernels/cpu/trunc_exp_kernels.cc (the functor; registers TruncExpOp<CPUDevice, T>)
//   CUDA kernels/cuda/trunc_exp_gpu.cc    (the functor; registers TruncExpOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_TRUNC_EXP_KERNEL_H_
#define MO_KERNELS_TRUNC_EXP_KERNEL_H_

#include <cstdint>

#include "kernels/spec/checks_tf.h"
#include "kernels/spec/trunc_exp_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// Defined per device, for n > 0 elements.
template <typename Device, typename T>
struct TruncExpFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, T* y);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* dy, const T* x, int64_t n, T* dx);
};

template <typename Device, typename T>
class TruncExpOp : public ::tensorflow::OpKernel {
 public:
  using ::tensorflow::OpKernel::OpKernel;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& x = ctx->input(0);
    ::tensorflow::Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (TruncExpFunctor<Device, T>::Forward(ctx, x.flat<T>().data(), n, y->flat<T>().data())));
  }
};

template <typename Device, typename T>
class TruncExpGradOp : public ::tensorflow::OpKernel {
 public:
  using ::tensorflow::OpKernel::OpKernel;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& dy = ctx->input(0);
    const ::tensorflow::Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, checks::ToStatus(trunc_exp::GradShape(checks::DimsOf(dy), checks::DimsOf(x))));
    ::tensorflow::Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (TruncExpFunctor<Device, T>::Backward(ctx, dy.flat<T>().data(), x.flat<T>().data(), n,
                                                              dx->flat<T>().data())));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_TRUNC_EXP_KERNEL_H_
