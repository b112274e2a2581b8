// The TensorFlow kernels of MetalOpsSHEncode / MetalOpsSHEncodeGrad, once for
// every C++-API device: the point-by-point kernel classes of
// kernels/framework/pointwise_kernel.h over the attribute and checks of kernels/sh_encode/sh_encode_spec.h
// and SHEncodeFunctor<Device, T>, the work, defined per device:
//   CPU  kernels/sh_encode/sh_encode_kernels.cc (the functor; registers SHEncodeOp<CPUDevice, T>)
//   CUDA kernels/sh_encode/sh_encode_gpu.cc    (the functor; registers SHEncodeOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_SH_ENCODE_SH_ENCODE_KERNEL_H_
#define MO_KERNELS_SH_ENCODE_SH_ENCODE_KERNEL_H_

#include <cstdint>

#include "kernels/framework/pointwise_kernel.h"
#include "kernels/sh_encode/sh_encode_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

// Defined per device, for n > 0 directions (dirs [n, 3], values [n, degree**2]).
template <typename Device, typename T>
struct SHEncodeFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* dirs, int64_t n, int degree, T* values);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* dirs, int64_t n,
                               int degree, T* grad_dirs);
};

// SHEncode in kernels/framework/pointwise_kernel.h: points of 3 (the directions), each giving
// degree**2 values; the functor takes the degree.
template <typename Device, typename T>
using SHEncodeOp = PointwiseOp<SHEncodeFunctor<Device, T>, T, sh_encode::Attrs, 3, &sh_encode::Attrs::degree>;
template <typename Device, typename T>
using SHEncodeGradOp = PointwiseGradOp<SHEncodeFunctor<Device, T>, T, sh_encode::Attrs, 3, &sh_encode::Attrs::degree>;

}  // namespace mo

#endif  // MO_KERNELS_SH_ENCODE_SH_ENCODE_KERNEL_H_
