// The TensorFlow kernels of MetalOpsPackedVolumeRender / ...Grad, once for
// every C++-API device (one kernel class templated on the device, a functor
// per device): the attributes and checks of kernels/packed_volume_render/packed_volume_render_spec.h
// and the output allocation here; PackedVolumeRenderFunctor<Device, T> does
// the work:
//   CPU  kernels/packed_volume_render/packed_volume_render_kernels.cc
//   CUDA kernels/packed_volume_render/packed_volume_render_gpu.cc
// The Metal kernels (packed_volume_render_metal.cc) use TensorFlow's C API and the same checks.
#ifndef MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_KERNEL_H_
#define MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_KERNEL_H_

#include <cstdint>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/common/render_args.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/packed_volume_render/packed_volume_render_spec.h"
#include "kernels/volume_render/volume_render_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

// The inputs both directions take first: sigma, rgb, t_starts, t_ends,
// ray_offsets, ray_counts, background.
template <typename T>
RenderArgs<T> PackedRenderArgs(const volume_render::RayShapes& shapes, const packed_volume_render::Attrs& attrs,
                               const ::tensorflow::Tensor* const* in) {
  return {shapes.rays, shapes.samples, shapes.background_per_ray, attrs.early_termination,
          in[0]->flat<T>().data(), in[1]->flat<T>().data(), in[6]->flat<T>().data(), attrs.validate};
}

template <typename T>
PackedSamples<T> PackedSamplesOf(const ::tensorflow::Tensor* const* in) {
  return {in[2]->flat<T>().data(), in[3]->flat<T>().data(), in[4]->flat<int32_t>().data(),
          in[5]->flat<int32_t>().data()};
}

// The checks of the inputs both directions take first, for `op`, and their
// ray shapes.
inline absl::Status CheckPackedInputs(::tensorflow::OpKernelContext* ctx, const char* op,
                                      packed_volume_render::RayShapes* shapes) {
  auto dims = [&](int i) { return checks::DimsOf(ctx->input(i)); };
  return checks::ToStatus(
      packed_volume_render::InputShapes(op, dims(0), dims(1), dims(2), dims(3), dims(4), dims(5), dims(6), shapes));
}

// Defined per device, for rays > 0. Both return the op's error for the first
// invalid ray (packed_volume_render::BadRay: layout first, then sample values
// in the forward) or a launch failure.
template <typename Device, typename T>
struct PackedVolumeRenderFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderForwardArgs<T>& args);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const PackedVolumeRenderBackwardArgs<T>& args);
};

template <typename Device, typename T>
class PackedVolumeRenderOp
    : public OpKernelWithAttrs<packed_volume_render::Attrs, packed_volume_render::kForward, true> {
 public:
  using OpKernelWithAttrs<packed_volume_render::Attrs, packed_volume_render::kForward, true>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    packed_volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckPackedInputs(ctx, packed_volume_render::kForward, &shapes));
    const ::tensorflow::Tensor* in[7];
    for (int i = 0; i < 7; ++i) in[i] = &ctx->input(i);
    const int64_t R = shapes.rays, N = shapes.samples;
    PackedVolumeRenderForwardArgs<T> args = {
        PackedRenderArgs<T>(shapes, attrs_, in), PackedSamplesOf<T>(in), {}};
    OP_REQUIRES_OK(ctx, AllocateRenderOutputs<T>(ctx, R, attrs_.return_weights, TensorShape({N}), TensorShape({0}),
                                                 &args));
    if (R == 0) return;
    OP_REQUIRES_OK(ctx, (PackedVolumeRenderFunctor<Device, T>::Forward(ctx, args)));
  }
};

template <typename Device, typename T>
class PackedVolumeRenderGradOp
    : public OpKernelWithAttrs<packed_volume_render::Attrs, packed_volume_render::kBackward, false> {
 public:
  using OpKernelWithAttrs<packed_volume_render::Attrs, packed_volume_render::kBackward, false>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const char* op = packed_volume_render::kBackward;
    packed_volume_render::RayShapes shapes;
    OP_REQUIRES_OK(ctx, CheckPackedInputs(ctx, op, &shapes));
    const ::tensorflow::Tensor* in[15];
    for (int i = 0; i < 15; ++i) in[i] = &ctx->input(i);
    auto dims = [&](int i) { return checks::DimsOf(*in[i]); };
    bool has_weight_grad = false;
    OP_REQUIRES_OK(ctx, checks::ToStatus(packed_volume_render::GradInputShapes(op, shapes, dims(7), dims(8), dims(9),
                                                                               dims(10), dims(11), dims(12), dims(13),
                                                                               dims(14), &has_weight_grad)));
    PackedVolumeRenderBackwardArgs<T> args = {
        PackedRenderArgs<T>(shapes, attrs_, in), PackedSamplesOf<T>(in), {}};
    OP_REQUIRES_OK(ctx, AllocateRenderGrads<T>(ctx, 7, shapes.rays, has_weight_grad, &args));
    if (shapes.rays == 0) return;
    OP_REQUIRES_OK(ctx, (PackedVolumeRenderFunctor<Device, T>::Backward(ctx, args)));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_PACKED_VOLUME_RENDER_PACKED_VOLUME_RENDER_KERNEL_H_
