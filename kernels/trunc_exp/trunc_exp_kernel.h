// The TensorFlow kernels of MetalOpsTruncExp / MetalOpsTruncExpGrad, once for
// every C++-API device: the point-by-point kernel classes of
// kernels/framework/pointwise_kernel.h over the checks of kernels/trunc_exp/trunc_exp_spec.h
// and TruncExpFunctor<Device, T>, the work, defined per device:
//   CPU  kernels/trunc_exp/trunc_exp_kernels.cc (the functor; registers TruncExpOp<CPUDevice, T>)
//   CUDA kernels/trunc_exp/trunc_exp_gpu.cc    (the functor; registers TruncExpOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_KERNEL_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_KERNEL_H_

#include <cstdint>

#include "kernels/framework/pointwise_kernel.h"
#include "kernels/trunc_exp/trunc_exp_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

// Defined per device, for n > 0 elements.
template <typename Device, typename T>
struct TruncExpFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, T* y);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* dy, const T* x, int64_t n, T* dx);
};

// TruncExp in kernels/framework/pointwise_kernel.h: single elements, no attribute.
template <typename Device, typename T>
using TruncExpOp = PointwiseOp<TruncExpFunctor<Device, T>, T, trunc_exp::Attrs, 1>;
template <typename Device, typename T>
using TruncExpGradOp = PointwiseGradOp<TruncExpFunctor<Device, T>, T, trunc_exp::Attrs, 1>;

}  // namespace mo

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_KERNEL_H_
