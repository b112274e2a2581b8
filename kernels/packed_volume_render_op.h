// The TensorFlow kernels of MetalOpsPackedVolumeRender / ...Grad, once for
// every C++-API device (one kernel class templated on the device, a functor
// per device): the attributes and checks of ops/packed_volume_render_checks.h
// and the output allocation here; PackedVolumeRenderFunctor<Device, T> does
// the work:
//   CPU  kernels/cpu/packed_volume_render_kernels.cc
//   CUDA kernels/cuda/packed_volume_render_gpu.cc
// The Metal kernels use TensorFlow's C API and the same checks (kernels/metal/).
#ifndef METAL_OPS_KERNELS_PACKED_VOLUME_RENDER_OP_H_
#define METAL_OPS_KERNELS_PACKED_VOLUME_RENDER_OP_H_

#include <cstdint>

#include "ops/checks_tf.h"
#include "ops/packed_volume_render_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

template <typename T>
struct PackedVolumeRenderForwardArgs {
  int64_t rays, samples;
  bool background_per_ray;
  float early_termination;
  const T *sigma, *rgb, *t_starts, *t_ends;
  const int32_t *offsets, *counts;
  const T* background;
  T *out_rgb, *depth, *opacity;
  T* weights;  // nullptr when the weights output is [0]
};

template <typename T>
struct PackedVolumeRenderBackwardArgs {
  int64_t rays, samples;
  bool background_per_ray;
  float early_termination;
  const T *sigma, *rgb, *t_starts, *t_ends;
  const int32_t *offsets, *counts;
  const T *background, *out_rgb, *depth, *opacity;
  const T* weights;  // nullptr (with grad_weights) when the forward returned no weights
  const T *grad_rgb, *grad_depth, *grad_opacity;
  const T* grad_weights;
  T *grad_sigma, *grad_samples_rgb, *grad_background;
};

// Defined per device, for rays > 0. Both return the op's error for the first
// invalid ray (packed_volume_render_checks: layout first, then sample values
// in the forward) or a launch failure.
template <typename Device, typename T>
struct PackedVolumeRenderFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderBackwardArgs<T>& args);
};

template <typename Device, typename T>
class PackedVolumeRenderOp : public checks::OpKernelWithAttrs<packed_volume_render_checks::Attrs, packed_volume_render_checks::kForward, true> {
 public:
  using checks::OpKernelWithAttrs<packed_volume_render_checks::Attrs, packed_volume_render_checks::kForward, true>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::Tensor;
    using ::tensorflow::TensorShape;
    namespace pc = packed_volume_render_checks;
    const Tensor* in[7];
    for (int i = 0; i < 7; ++i) in[i] = &ctx->input(i);
    pc::Shapes shapes;
    OP_REQUIRES_OK(ctx, checks::ToStatus(pc::InputShapes(
                            pc::kForward, checks::DimsOf(*in[0]), checks::DimsOf(*in[1]), checks::DimsOf(*in[2]),
                            checks::DimsOf(*in[3]), checks::DimsOf(*in[4]), checks::DimsOf(*in[5]),
                            checks::DimsOf(*in[6]), &shapes)));
    const int64_t R = shapes.rays, N = shapes.samples;
    Tensor *out_rgb = nullptr, *depth = nullptr, *opacity = nullptr, *weights = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({R, 3}), &out_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({R}), &depth));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R}), &opacity));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({attrs_.return_weights ? N : 0}), &weights));
    if (R == 0) return;
    auto data = [&](int i) { return in[i]->flat<T>().data(); };
    const PackedVolumeRenderForwardArgs<T> args = {
        R, N, shapes.background_per_ray, attrs_.early_termination,
        data(0), data(1), data(2), data(3),
        in[4]->flat<int32_t>().data(), in[5]->flat<int32_t>().data(), data(6),
        out_rgb->flat<T>().data(), depth->flat<T>().data(), opacity->flat<T>().data(),
        attrs_.return_weights ? weights->flat<T>().data() : nullptr};
    OP_REQUIRES_OK(ctx, (PackedVolumeRenderFunctor<Device, T>::Forward(ctx, args)));
  }

};

template <typename Device, typename T>
class PackedVolumeRenderGradOp : public checks::OpKernelWithAttrs<packed_volume_render_checks::Attrs, packed_volume_render_checks::kBackward, false> {
 public:
  using checks::OpKernelWithAttrs<packed_volume_render_checks::Attrs, packed_volume_render_checks::kBackward, false>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::Tensor;
    using ::tensorflow::TensorShape;
    namespace pc = packed_volume_render_checks;
    const char* op = pc::kBackward;
    const Tensor* in[15];
    for (int i = 0; i < 15; ++i) in[i] = &ctx->input(i);
    auto dims = [&](int i) { return checks::DimsOf(*in[i]); };
    pc::Shapes shapes;
    OP_REQUIRES_OK(ctx, checks::ToStatus(pc::InputShapes(op, dims(0), dims(1), dims(2), dims(3), dims(4), dims(5),
                                                         dims(6), &shapes)));
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, checks::ToStatus(pc::GradInputShapes(op, shapes, dims(7), dims(8), dims(9), dims(10),
                                                             dims(11), dims(12), dims(13), dims(14),
                                                             &has_weight_grad)));
    const int64_t R = shapes.rays;
    Tensor *grad_sigma = nullptr, *grad_samples_rgb = nullptr, *grad_background = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, in[0]->shape(), &grad_sigma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, in[1]->shape(), &grad_samples_rgb));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({R, 3}), &grad_background));
    if (R == 0) return;
    auto data = [&](int i) { return in[i]->flat<T>().data(); };
    const PackedVolumeRenderBackwardArgs<T> args = {
        R, shapes.samples, shapes.background_per_ray, attrs_.early_termination,
        data(0), data(1), data(2), data(3),
        in[4]->flat<int32_t>().data(), in[5]->flat<int32_t>().data(),
        data(6), data(7), data(8), data(9),
        has_weight_grad ? data(10) : nullptr,
        data(11), data(12), data(13),
        has_weight_grad ? data(14) : nullptr,
        grad_sigma->flat<T>().data(), grad_samples_rgb->flat<T>().data(), grad_background->flat<T>().data()};
    OP_REQUIRES_OK(ctx, (PackedVolumeRenderFunctor<Device, T>::Backward(ctx, args)));
  }

};

}  // namespace mo

#endif  // METAL_OPS_KERNELS_PACKED_VOLUME_RENDER_OP_H_
