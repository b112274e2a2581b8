// The TensorFlow kernels of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad,
// once for every C++-API device (TensorFlow's pattern: one kernel class
// templated on the device, a functor per device). The class reads the
// attributes, runs the checks of kernels/volume_render/volume_render_spec.h and allocates the
// outputs; VolumeRenderFunctor<Device, T> does the work:
//   CPU  kernels/volume_render/volume_render_kernels.cc (registers VolumeRenderOp<CPUDevice, T>)
//   CUDA kernels/volume_render/volume_render_gpu.cc    (registers VolumeRenderOp<GPUDevice, T>)
// The Metal kernels (volume_render_metal.cc) use TensorFlow's C API and the same checks.
#ifndef MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_KERNEL_H_
#define MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_KERNEL_H_

#include <cstdint>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/common/render_args.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/volume_render/volume_render_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

// Allocates the forward's outputs, out_rgb [R, 3], depth [R], opacity [R] and
// weights (`weights` when return_weights, else `no_weights`), into *out.
template <typename T>
absl::Status AllocateRenderOutputs(::tensorflow::OpKernelContext* ctx, int64_t R, bool return_weights,
                                   const ::tensorflow::TensorShape& weights,
                                   const ::tensorflow::TensorShape& no_weights, RenderOutputs<T>* out) {
  using ::tensorflow::Tensor;
  using ::tensorflow::TensorShape;
  Tensor *out_rgb = nullptr, *depth = nullptr, *opacity = nullptr, *weights_out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({R, 3}), &out_rgb));
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({R}), &depth));
  TF_RETURN_IF_ERROR(ctx->allocate_output(2, TensorShape({R}), &opacity));
  TF_RETURN_IF_ERROR(ctx->allocate_output(3, return_weights ? weights : no_weights, &weights_out));
  *out = {out_rgb->flat<T>().data(), depth->flat<T>().data(), opacity->flat<T>().data(),
          return_weights ? weights_out->flat<T>().data() : nullptr};
  return absl::OkStatus();
}

// The backward's inputs from `first` on (out_rgb, depth, opacity, weights and
// their gradients; the weights only when has_weight_grad) and its outputs,
// grad_sigma and grad_samples_rgb shaped like sigma and rgb (inputs 0 and 1),
// grad_background [R, 3], allocated, into *grads.
template <typename T>
absl::Status AllocateRenderGrads(::tensorflow::OpKernelContext* ctx, int first, int64_t R, bool has_weight_grad,
                                 RenderGrads<T>* grads) {
  using ::tensorflow::Tensor;
  Tensor *grad_sigma = nullptr, *grad_samples_rgb = nullptr, *grad_background = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(0, ctx->input(0).shape(), &grad_sigma));
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, ctx->input(1).shape(), &grad_samples_rgb));
  TF_RETURN_IF_ERROR(ctx->allocate_output(2, ::tensorflow::TensorShape({R, 3}), &grad_background));
  auto in = [&](int i) { return ctx->input(first + i).flat<T>().data(); };
  *grads = {in(0), in(1), in(2), has_weight_grad ? in(3) : nullptr,
            in(4), in(5), in(6), has_weight_grad ? in(7) : nullptr,
            grad_sigma->flat<T>().data(), grad_samples_rgb->flat<T>().data(), grad_background->flat<T>().data()};
  return absl::OkStatus();
}

// The checks of the inputs both directions take first (sigma, rgb, t,
// background), for `op`, and their ray shapes.
inline absl::Status CheckRenderInputs(::tensorflow::OpKernelContext* ctx, const char* op,
                                      volume_render::RayShapes* shapes) {
  using checks::DimsOf;
  return checks::ToStatus(volume_render::InputShapes(op, DimsOf(ctx->input(0)), DimsOf(ctx->input(1)),
                                                     DimsOf(ctx->input(2)), DimsOf(ctx->input(3)), shapes));
}

// Defined per device. Forward returns the op's error for the first invalid ray
// (volume_render::BadRay), Backward a launch failure; rays > 0.
template <typename Device, typename T>
struct VolumeRenderFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const VolumeRenderForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const VolumeRenderBackwardArgs<T>& args);
};

template <typename Device, typename T>
class VolumeRenderOp : public OpKernelWithAttrs<volume_render::Attrs, true> {
 public:
  using OpKernelWithAttrs<volume_render::Attrs, true>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckRenderInputs(ctx, volume_render::kForward, &shapes));
    const int64_t R = shapes.rays, S = shapes.samples;
    auto data = [&](int i) { return ctx->input(i).flat<T>().data(); };
    VolumeRenderForwardArgs<T> args = {
        {R, S, shapes.background_per_ray, attrs_.early_termination, data(0), data(1), data(3), attrs_.validate},
        {data(2)},
        {}};
    OP_REQUIRES_OK(ctx, AllocateRenderOutputs<T>(ctx, R, attrs_.return_weights, TensorShape({R, S}),
                                                 TensorShape({R, 0}), &args));
    if (R == 0) return;
    OP_REQUIRES_OK(ctx, (VolumeRenderFunctor<Device, T>::Forward(ctx, args)));
  }
};

template <typename Device, typename T>
class VolumeRenderGradOp : public OpKernelWithAttrs<volume_render::Attrs, false> {
 public:
  using OpKernelWithAttrs<volume_render::Attrs, false>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const char* op = volume_render::kBackward;
    volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckRenderInputs(ctx, op, &shapes));
    bool has_weight_grad = false;
    auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
    OP_REQUIRES_OK(ctx, checks::ToStatus(volume_render::GradInputShapes(op, shapes, dims(4), dims(5), dims(6), dims(7),
                                                                        dims(8), dims(9), dims(10), dims(11),
                                                                        &has_weight_grad)));
    const int64_t R = shapes.rays;
    auto data = [&](int i) { return ctx->input(i).flat<T>().data(); };
    VolumeRenderBackwardArgs<T> args = {
        {R, shapes.samples, shapes.background_per_ray, attrs_.early_termination, data(0), data(1), data(3),
         attrs_.validate},
        {data(2)},
        {}};
    OP_REQUIRES_OK(ctx, AllocateRenderGrads<T>(ctx, 4, R, has_weight_grad, &args));
    if (R == 0) return;
    OP_REQUIRES_OK(ctx, (VolumeRenderFunctor<Device, T>::Backward(ctx, args)));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_VOLUME_RENDER_VOLUME_RENDER_KERNEL_H_
