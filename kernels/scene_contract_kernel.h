// The TensorFlow kernels of MetalOpsSceneContract / MetalOpsSceneContractGrad,
// once for every C++-API device (one kernel class templated on the device, a
// functor per device): the attribute read, the checks of
// kernels/spec/scene_contract_spec.h and the output allocation here;
// SceneContractFunctor<Device, T> does the work:
//   CPU  kernels/cpu/scene_contract_kernels.cc (the functor; registers SceneContractOp<CPUDevice, T>)
//   CUDA kernels/cuda/scene_contract_gpu.cc    (the functor; registers SceneContractOp<GPUDevice, T>)
// T is float or Eigen::half; the arithmetic is float32 for both.
#ifndef MO_KERNELS_SCENE_CONTRACT_KERNEL_H_
#define MO_KERNELS_SCENE_CONTRACT_KERNEL_H_

#include <cstdint>

#include "kernels/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/scene_contract_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// Defined per device, for n > 0 points (x, y, grad and dx [n, 3]).
template <typename Device, typename T>
struct SceneContractFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, int norm, T* y);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* x, int64_t n, int norm,
                               T* dx);
};

template <typename Device, typename T>
class SceneContractOp : public OpKernelWithAttrs<scene_contract::Attrs> {
 public:
  using OpKernelWithAttrs<scene_contract::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& x = ctx->input(0);
    OP_REQUIRES_OK(ctx, checks::ToStatus(scene_contract::XShape(checks::DimsOf(x))));
    ::tensorflow::Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const int64_t n = x.NumElements() / 3;
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (SceneContractFunctor<Device, T>::Forward(ctx, x.flat<T>().data(), n, attrs_.norm,
                                                                  y->flat<T>().data())));
  }
};

template <typename Device, typename T>
class SceneContractGradOp : public OpKernelWithAttrs<scene_contract::Attrs> {
 public:
  using OpKernelWithAttrs<scene_contract::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& grad = ctx->input(0);
    const ::tensorflow::Tensor& x = ctx->input(1);
    const checks::Dims dims = checks::DimsOf(x);
    OP_REQUIRES_OK(ctx, checks::ToStatus(scene_contract::XShape(dims)));
    OP_REQUIRES_OK(ctx, checks::ToStatus(scene_contract::GradShape(checks::DimsOf(grad), dims)));
    ::tensorflow::Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    const int64_t n = x.NumElements() / 3;
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, (SceneContractFunctor<Device, T>::Backward(ctx, grad.flat<T>().data(), x.flat<T>().data(),
                                                                   n, attrs_.norm, dx->flat<T>().data())));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_SCENE_CONTRACT_KERNEL_H_
