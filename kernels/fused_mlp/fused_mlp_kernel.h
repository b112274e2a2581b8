// The TensorFlow kernels of MetalOpsFusedMLP / MetalOpsFusedMLPGrad, once for
// every C++-API device (one kernel class templated on the device, a functor
// per device): the attributes and checks of kernels/fused_mlp/fused_mlp_spec.h and the
// output allocation here; FusedMlpFunctor<Device, T> does the work:
//   CPU  kernels/fused_mlp/fused_mlp_kernels.cc (the functor; registers FusedMlpOp<CPUDevice, T>)
//   CUDA kernels/fused_mlp/fused_mlp_gpu.cc    (the functor; registers FusedMlpOp<GPUDevice, T>)
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_KERNEL_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_KERNEL_H_

#include <cstdint>
#include <vector>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/fused_mlp/fused_mlp_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

template <typename T>
struct FusedMlpForwardArgs {
  int64_t n;
  const T* x;
  std::vector<const T*> kernels, biases;  // hidden_layers + 1 each
  T* y;
  T* hidden;  // [hidden_layers, n, width]
};

template <typename T>
struct FusedMlpBackwardArgs {
  int64_t n;
  const T *grad_y, *x, *y, *hidden;
  std::vector<const T*> kernels;
  T* grad_x;
  std::vector<T*> grad_kernels, grad_biases;
};

// Defined per device; n may be 0 (the gradients are then zeros). `hidden` of
// the forward and grad_x / grad_kernels[l] / grad_biases[l] of the backward
// may be null: not wanted.
template <typename Device, typename T>
struct FusedMlpFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const fused_mlp::Net& net,
                              const fused_mlp::Attrs& attrs, const FusedMlpForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const fused_mlp::Net& net,
                               const fused_mlp::Attrs& attrs, const FusedMlpBackwardArgs<T>& args);
};

inline std::vector<checks::Dims> DimsOfList(const ::tensorflow::OpInputList& list) {
  std::vector<checks::Dims> dims;
  for (int i = 0; i < list.size(); ++i) dims.push_back(checks::DimsOf(list[i]));
  return dims;
}

// Output `index` allocated, or left null where the graph consumes it nowhere
// (an inference graph's `hidden`, a gradient no one asked for), and the
// functor skips that work.
template <typename T>
absl::Status AllocateWanted(::tensorflow::OpKernelContext* ctx, int index, const ::tensorflow::TensorShape& shape,
                            T** data) {
  *data = nullptr;
  if (!ctx->output_required(index)) return absl::OkStatus();
  ::tensorflow::Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  *data = out->flat<T>().data();
  return absl::OkStatus();
}

template <typename Device, typename T>
class FusedMlpOp : public OpKernelWithAttrs<fused_mlp::Attrs> {
 public:
  using OpKernelWithAttrs<fused_mlp::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& x = ctx->input(0);
    ::tensorflow::OpInputList kernels, biases;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    OP_REQUIRES_OK(ctx, ctx->input_list("biases", &biases));
    fused_mlp::Net net;
    OP_REQUIRES_OK(
        ctx, checks::ToStatus(fused_mlp::Shapes(checks::DimsOf(x), DimsOfList(kernels), DimsOfList(biases), &net)));
    const int64_t n = x.dim_size(0);
    ::tensorflow::Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({n, net.out_dim}), &y));
    T* hidden = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 1, ::tensorflow::TensorShape({net.hidden_layers, n, net.width}), &hidden));
    FusedMlpForwardArgs<T> args{n, x.flat<T>().data(), {}, {}, y->flat<T>().data(), hidden};
    for (int l = 0; l < kernels.size(); ++l) {
      args.kernels.push_back(kernels[l].flat<T>().data());
      args.biases.push_back(biases[l].flat<T>().data());
    }
    OP_REQUIRES_OK(ctx, (FusedMlpFunctor<Device, T>::Forward(ctx, net, attrs_, args)));
  }
};

template <typename Device, typename T>
class FusedMlpGradOp : public OpKernelWithAttrs<fused_mlp::Attrs> {
 public:
  using OpKernelWithAttrs<fused_mlp::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& dy = ctx->input(0);
    const ::tensorflow::Tensor& x = ctx->input(1);
    ::tensorflow::OpInputList kernels;
    OP_REQUIRES_OK(ctx, ctx->input_list("kernels", &kernels));
    const ::tensorflow::Tensor& y = ctx->input(2 + kernels.size());
    const ::tensorflow::Tensor& hidden = ctx->input(3 + kernels.size());
    // The biases' shapes follow from the kernels'.
    std::vector<checks::Dims> bias_dims;
    for (int l = 0; l < kernels.size(); ++l) {
      bias_dims.push_back({kernels[l].dims() == 2 ? kernels[l].dim_size(1) : 0});
    }
    fused_mlp::Net net;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::Shapes(checks::DimsOf(x), DimsOfList(kernels), bias_dims, &net)));
    const int64_t n = x.dim_size(0);
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_mlp::GradShapes(net, n, checks::DimsOf(dy), checks::DimsOf(y),
                                                               checks::DimsOf(hidden))));
    T* dx = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 0, x.shape(), &dx));
    FusedMlpBackwardArgs<T> args{n, dy.flat<T>().data(), x.flat<T>().data(), y.flat<T>().data(),
                                 hidden.flat<T>().data(), {}, dx, {}, {}};
    // Outputs: grad_x, then grad_kernels[0..N), then grad_biases[0..N).
    const int num = kernels.size();
    for (int l = 0; l < num; ++l) {
      T *dk = nullptr, *db = nullptr;
      OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 1 + l, kernels[l].shape(), &dk));
      OP_REQUIRES_OK(ctx, AllocateWanted(ctx, 1 + num + l, ::tensorflow::TensorShape({kernels[l].dim_size(1)}), &db));
      args.kernels.push_back(kernels[l].flat<T>().data());
      args.grad_kernels.push_back(dk);
      args.grad_biases.push_back(db);
    }
    OP_REQUIRES_OK(ctx, (FusedMlpFunctor<Device, T>::Backward(ctx, net, attrs_, args)));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_KERNEL_H_
