// The TensorFlow kernels of MetalOpsSHEncode / MetalOpsSHEncodeGrad, once for
// every C++-API device (one kernel class templated on the device, a functor
// per device): the attribute read, the checks of kernels/spec/sh_encode_spec.h and the
// output allocation here; SHEncodeFunctor<Device, T> does the work:
//   CPU  kernels/cpu/sh_encode_kernels.cc (the functor; registers SHEncodeOp<CPUDevice, T>)
//   CUDA kernels/cuda/sh_encode_gpu.cc    (the functor; registers SHEncodeOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_SH_ENCODE_KERNEL_H_
#define MO_KERNELS_SH_ENCODE_KERNEL_H_

#include <cstdint>

#include "kernels/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/sh_encode_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// Defined per device, for n > 0 directions (dirs [n, 3], values [n, degree**2]).
template <typename Device, typename T>
struct SHEncodeFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* dirs, int64_t n, int degree, T* values);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* dirs, int64_t n,
                               int degree, T* grad_dirs);
};

template <typename Device, typename T>
class SHEncodeOp : public OpKernelWithAttrs<sh_encode::Attrs> {
 public:
  using OpKernelWithAttrs<sh_encode::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& dirs = ctx->input(0);
    const checks::Dims dims = checks::DimsOf(dirs);
    OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::DirsShape(dims)));
    ::tensorflow::TensorShape shape;
    OP_REQUIRES_OK(ctx,
                   ::tensorflow::TensorShape::BuildTensorShape(sh_encode::OutputDims(dims, attrs_.degree), &shape));
    ::tensorflow::Tensor* values = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &values));
    const int64_t n = dirs.NumElements() / 3;
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (SHEncodeFunctor<Device, T>::Forward(ctx, dirs.flat<T>().data(), n, attrs_.degree,
                                                             values->flat<T>().data())));
  }
};

template <typename Device, typename T>
class SHEncodeGradOp : public OpKernelWithAttrs<sh_encode::Attrs> {
 public:
  using OpKernelWithAttrs<sh_encode::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& grad = ctx->input(0);
    const ::tensorflow::Tensor& dirs = ctx->input(1);
    const checks::Dims dims = checks::DimsOf(dirs);
    OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::DirsShape(dims)));
    OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::GradShape(checks::DimsOf(grad), dims, attrs_.degree)));
    ::tensorflow::Tensor* grad_dirs = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dirs.shape(), &grad_dirs));
    const int64_t n = dirs.NumElements() / 3;
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (SHEncodeFunctor<Device, T>::Backward(ctx, grad.flat<T>().data(), dirs.flat<T>().data(), n,
                                                              attrs_.degree, grad_dirs->flat<T>().data())));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_SH_ENCODE_KERNEL_H_
