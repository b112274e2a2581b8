// The TensorFlow kernels of MetalOpsSHEncode / MetalOpsSHEncodeGrad, once for
// every C++-API device: the point-by-point kernel classes of
// kernels/pointwise_kernel.h over SHEncodePointwise, which names
// the attribute and checks of kernels/spec/sh_encode_spec.h and
// SHEncodeFunctor<Device, T>, the work, defined per device:
//   CPU  kernels/cpu/sh_encode_kernels.cc (the functor; registers SHEncodeOp<CPUDevice, T>)
//   CUDA kernels/cuda/sh_encode_gpu.cc    (the functor; registers SHEncodeOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_SH_ENCODE_KERNEL_H_
#define MO_KERNELS_SH_ENCODE_KERNEL_H_

#include <cstdint>
#include <tuple>

#include "kernels/pointwise_kernel.h"
#include "kernels/spec/sh_encode_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

// Defined per device, for n > 0 directions (dirs [n, 3], values [n, degree**2]).
template <typename Device, typename T>
struct SHEncodeFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* dirs, int64_t n, int degree, T* values);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* dirs, int64_t n,
                               int degree, T* grad_dirs);
};

// SHEncode in kernels/pointwise_kernel.h: points of 3 (the directions), the
// degree; each gives degree**2 values.
struct SHEncodePointwise {
  using Attrs = sh_encode::Attrs;
  static constexpr int64_t kPointSize = 3;
  template <typename Device, typename T>
  using Functor = SHEncodeFunctor<Device, T>;
  static std::tuple<int> FunctorArgs(const Attrs& a) { return {a.degree}; }
};

template <typename Device, typename T>
using SHEncodeOp = PointwiseOp<Device, T, SHEncodePointwise>;
template <typename Device, typename T>
using SHEncodeGradOp = PointwiseGradOp<Device, T, SHEncodePointwise>;

}  // namespace mo

#endif  // MO_KERNELS_SH_ENCODE_KERNEL_H_
