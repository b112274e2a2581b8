// The TensorFlow kernels of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad,
// once for every C++-API device (TensorFlow's pattern: one kernel class
// templated on the device, a functor per device). The class reads the
// attributes, runs the checks of ops/volume_render_checks.h and allocates the
// outputs; VolumeRenderFunctor<Device, T> does the work:
//   CPU  kernels/cpu/volume_render_kernels.cc (registers VolumeRenderOp<CPUDevice, T>)
//   CUDA kernels/cuda/volume_render_gpu.cc    (registers VolumeRenderOp<GPUDevice, T>)
// The Metal kernels use TensorFlow's C API and the same checks (kernels/metal/).
#ifndef METAL_OPS_KERNELS_VOLUME_RENDER_OP_H_
#define METAL_OPS_KERNELS_VOLUME_RENDER_OP_H_

#include <cstdint>

#include "ops/checks_tf.h"
#include "ops/volume_render_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

template <typename T>
struct VolumeRenderForwardArgs {
  int64_t rays, samples;
  bool background_per_ray;
  float early_termination;
  const T *sigma, *rgb, *t, *background;
  T *out_rgb, *depth, *opacity;
  T* weights;  // nullptr when the weights output is [R, 0]
};

template <typename T>
struct VolumeRenderBackwardArgs {
  int64_t rays, samples;
  bool background_per_ray;
  float early_termination;
  const T *sigma, *rgb, *t, *background, *out_rgb, *depth, *opacity;
  const T* weights;  // nullptr (with grad_weights) when the forward returned no weights
  const T *grad_rgb, *grad_depth, *grad_opacity;
  const T* grad_weights;
  T *grad_sigma, *grad_samples_rgb, *grad_background;
};

// Defined per device. Forward returns the op's error for the first invalid ray
// (volume_render_checks::BadRay), Backward a launch failure; rays > 0.
template <typename Device, typename T>
struct VolumeRenderFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const VolumeRenderForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const VolumeRenderBackwardArgs<T>& args);
};

template <typename Device, typename T>
class VolumeRenderOp : public checks::OpKernelWithAttrs<volume_render_checks::Attrs, true> {
 public:
  using checks::OpKernelWithAttrs<volume_render_checks::Attrs, true>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::Tensor;
    using ::tensorflow::TensorShape;
    const Tensor& sigma = ctx->input(0);
    const Tensor& rgb = ctx->input(1);
    const Tensor& t = ctx->input(2);
    const Tensor& background = ctx->input(3);
    volume_render_checks::RayShapes shapes;
    OP_REQUIRES_OK(ctx, checks::ToStatus(volume_render_checks::InputShapes(
                            volume_render_checks::kForward, checks::DimsOf(sigma), checks::DimsOf(rgb),
                            checks::DimsOf(t), checks::DimsOf(background), &shapes)));
    const int64_t R = shapes.rays, S = shapes.samples;
    Tensor *out_rgb = nullptr, *depth = nullptr, *opacity = nullptr, *weights = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({R, 3}), &out_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({R}), &depth));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R}), &opacity));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({R, attrs_.return_weights ? S : 0}), &weights));
    if (R == 0) return;
    const VolumeRenderForwardArgs<T> args = {
        R, S, shapes.background_per_ray, attrs_.early_termination,
        sigma.flat<T>().data(), rgb.flat<T>().data(), t.flat<T>().data(), background.flat<T>().data(),
        out_rgb->flat<T>().data(), depth->flat<T>().data(), opacity->flat<T>().data(),
        attrs_.return_weights ? weights->flat<T>().data() : nullptr};
    OP_REQUIRES_OK(ctx, (VolumeRenderFunctor<Device, T>::Forward(ctx, args)));
  }
};

template <typename Device, typename T>
class VolumeRenderGradOp : public checks::OpKernelWithAttrs<volume_render_checks::Attrs, false> {
 public:
  using checks::OpKernelWithAttrs<volume_render_checks::Attrs, false>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::Tensor;
    using ::tensorflow::TensorShape;
    const char* op = volume_render_checks::kBackward;
    const Tensor* in[12];
    for (int i = 0; i < 12; ++i) in[i] = &ctx->input(i);
    volume_render_checks::RayShapes shapes;
    OP_REQUIRES_OK(ctx, checks::ToStatus(volume_render_checks::InputShapes(
                            op, checks::DimsOf(*in[0]), checks::DimsOf(*in[1]), checks::DimsOf(*in[2]),
                            checks::DimsOf(*in[3]), &shapes)));
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, checks::ToStatus(volume_render_checks::GradInputShapes(
                            op, shapes, checks::DimsOf(*in[4]), checks::DimsOf(*in[5]), checks::DimsOf(*in[6]),
                            checks::DimsOf(*in[7]), checks::DimsOf(*in[8]), checks::DimsOf(*in[9]),
                            checks::DimsOf(*in[10]), checks::DimsOf(*in[11]), &has_weight_grad)));
    const int64_t R = shapes.rays;
    Tensor *grad_sigma = nullptr, *grad_samples_rgb = nullptr, *grad_background = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, in[0]->shape(), &grad_sigma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, in[1]->shape(), &grad_samples_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R, 3}), &grad_background));
    if (R == 0) return;
    auto data = [&](int i) { return in[i]->flat<T>().data(); };
    const VolumeRenderBackwardArgs<T> args = {
        R, shapes.samples, shapes.background_per_ray, attrs_.early_termination,
        data(0), data(1), data(2), data(3), data(4), data(5), data(6),
        has_weight_grad ? data(7) : nullptr,
        data(8), data(9), data(10),
        has_weight_grad ? data(11) : nullptr,
        grad_sigma->flat<T>().data(), grad_samples_rgb->flat<T>().data(), grad_background->flat<T>().data()};
    OP_REQUIRES_OK(ctx, (VolumeRenderFunctor<Device, T>::Backward(ctx, args)));
  }
};

}  // namespace mo

#endif  // METAL_OPS_KERNELS_VOLUME_RENDER_OP_H_
