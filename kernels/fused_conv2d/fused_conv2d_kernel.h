// The TensorFlow kernels of MetalOpsFusedConv2D / MetalOpsFusedActivationGrad,
// once for every C++-API device (one kernel class templated on the device, a
// functor per device): the checks of kernels/fused_conv2d/fused_conv2d_spec.h and the output
// allocation here; FusedConv2DFunctor<Device> and
// FusedActivationGradFunctor<Device> do the work:
//   CPU  kernels/fused_conv2d/fused_conv2d_kernels.cc (the functors; registers FusedConv2DOp<CPUDevice>)
//   CUDA kernels/fused_conv2d/fused_conv2d_gpu.cc    (the functors; registers FusedConv2DOp<GPUDevice>)
#ifndef MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_KERNEL_H_
#define MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_KERNEL_H_

#include <cstdint>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/fused_conv2d/fused_conv2d_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

// One call of MetalOpsFusedConv2D, checked: float32 NHWC input, HWIO filter,
// bias ([Cout]) and residual (the output's shape) or nullptr.
struct FusedConv2DArgs {
  fused_conv2d::ConvGeometry g;
  const float* input;
  const float* filter;
  const float* bias;
  const float* residual;
  int act;
  float alpha;
};

// Defined per device.
template <typename Device>
struct FusedConv2DFunctor {
  // output = act(conv2d(input, filter) + bias + residual) for a non-empty
  // output; the contraction may be empty (no input channels, or an empty
  // input with padding around it): the convolution is then 0.
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const FusedConv2DArgs& args, float* output);
};

template <typename Device>
struct FusedActivationGradFunctor {
  // backprops[i] = gradients[i] * act'(z[i]) for n > 0 elements, from features
  // (z) when not nullptr, else from outputs (y = act(z)). backprops may be
  // gradients (element i is read before it is written).
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const float* gradients, const float* outputs,
                              const float* features, int64_t n, int act, float alpha, float* backprops);
};

template <typename Device>
class FusedConv2DOp : public OpKernelWithAttrs<fused_conv2d::ConvAttrs> {
 public:
  using OpKernelWithAttrs<fused_conv2d::ConvAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& input = ctx->input(0);
    const ::tensorflow::Tensor& filter = ctx->input(1);
    FusedConv2DArgs args{};
    OP_REQUIRES_OK(
        ctx, checks::ToStatus(fused_conv2d::Geometry(attrs_, checks::DimsOf(input), checks::DimsOf(filter), &args.g)));
    const fused_conv2d::ConvGeometry& g = args.g;
    OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::GemmSizes(g, checks::DimsOf(filter))));
    const ::tensorflow::TensorShape out_shape({g.batch, g.out_rows, g.out_cols, g.out_depth});
    if (attrs_.num_bias == 1) {
      const ::tensorflow::Tensor& b = ctx->input(2);
      OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Bias(checks::DimsOf(b), g.out_depth)));
      args.bias = b.flat<float>().data();
    }
    if (attrs_.num_residual == 1) {
      const ::tensorflow::Tensor& r = ctx->input(2 + attrs_.num_bias);
      OP_REQUIRES_OK(ctx, checks::ToStatus(fused_conv2d::Residual(checks::DimsOf(r), g.output_dims())));
      args.residual = r.flat<float>().data();
    }
    ::tensorflow::Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;
    args.input = input.flat<float>().data();
    args.filter = filter.flat<float>().data();
    args.act = attrs_.act;
    args.alpha = attrs_.alpha;
    OP_REQUIRES_OK(ctx, FusedConv2DFunctor<Device>::Compute(ctx, args, output->flat<float>().data()));
  }
};

template <typename Device>
class FusedActivationGradOp : public OpKernelWithAttrs<fused_conv2d::ActivationGradAttrs> {
 public:
  using OpKernelWithAttrs<fused_conv2d::ActivationGradAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& grads = ctx->input(0);
    const ::tensorflow::Tensor& outputs = ctx->input(1);
    const ::tensorflow::Tensor* features = attrs_.num_features == 1 ? &ctx->input(2) : nullptr;
    const checks::Dims feature_dims = features != nullptr ? checks::DimsOf(*features) : checks::Dims();
    OP_REQUIRES_OK(ctx,
                   checks::ToStatus(fused_conv2d::ActivationGradShapes(checks::DimsOf(grads), checks::DimsOf(outputs),
                                                                       features != nullptr ? &feature_dims : nullptr)));
    // In place over the incoming gradients when nothing else holds them (as
    // TF's ReluGrad does): no fresh buffer to fault in.
    ::tensorflow::Tensor* backprops = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, grads.shape(), &backprops));
    const int64_t n = grads.NumElements();
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, FusedActivationGradFunctor<Device>::Compute(
                            ctx, grads.flat<float>().data(), outputs.flat<float>().data(),
                            features != nullptr ? features->flat<float>().data() : nullptr, n, attrs_.act,
                            attrs_.alpha, backprops->flat<float>().data()));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_FUSED_CONV2D_FUSED_CONV2D_KERNEL_H_
