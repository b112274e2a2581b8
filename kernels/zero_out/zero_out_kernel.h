// The TensorFlow kernel of ZeroOut, once for every C++-API device (one kernel
// class templated on the device and the dtype, a functor per device, TF's
// pattern): the attributes and check of kernels/zero_out/zero_out_spec.h and the output
// allocation here; ZeroOutFunctor<Device, T> does the work:
//   CPU  kernels/zero_out/zero_out_kernels.cc (the functor; registers ZeroOutOp<CPUDevice, T>)
//   CUDA kernels/zero_out/zero_out_gpu.cc    (the functor; registers ZeroOutOp<GPUDevice, T>)
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_KERNEL_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_KERNEL_H_

#include <cstdint>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/zero_out/zero_out_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// Defined per device: out[i] = zero_out_element(in[i], i, preserve_index)
// (kernels/zero_out/zero_out.h) for i < n, n > 0.
template <typename Device, typename T>
struct ZeroOutFunctor {
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const T* in, T* out, int64_t n,
                              int64_t preserve_index);
};

template <typename Device, typename T>
class ZeroOutOp : public OpKernelWithAttrs<zero_out::Attrs> {
 public:
  using OpKernelWithAttrs<zero_out::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& input = ctx->input(0);
    const int64_t n = input.NumElements();
    OP_REQUIRES_OK(ctx, checks::ToStatus(zero_out::PreserveIndex(attrs_.preserve_index, n)));
    ::tensorflow::Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, input.shape(), &output));
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (ZeroOutFunctor<Device, T>::Compute(ctx, input.flat<T>().data(), output->flat<T>().data(), n,
                                                            attrs_.preserve_index)));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_KERNEL_H_
