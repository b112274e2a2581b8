// The TensorFlow kernel of MetalOpsRayMarch, once for every C++-API device
// (one kernel class templated on the device, a functor per device): the
// attributes and checks of kernels/ray_march/ray_march_spec.h, the output allocation
// between the two passes here; RayMarchFunctor<Device> does the work:
//   CPU  kernels/ray_march/ray_march_kernels.cc (registers RayMarchOp<CPUDevice>)
//   CUDA kernels/ray_march/ray_march_gpu.cc    (registers RayMarchOp<GPUDevice>)
// The number of samples decides the outputs' shapes, so the first pass's
// total reaches the host before the outputs are allocated.
// RayMarchStaticOp (MetalOpsRayMarchStatic, CPU only) has outputs sized to
// the sample_budget attribute instead: RayMarchFunctor<Device>::Static.
#ifndef MO_KERNELS_RAY_MARCH_RAY_MARCH_KERNEL_H_
#define MO_KERNELS_RAY_MARCH_RAY_MARCH_KERNEL_H_

#include <cstdint>

#include "kernels/ray_march/ray_march.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/ray_march/ray_march_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// Defined per device, Count and Fill for R > 0.
template <typename Device>
struct RayMarchFunctor {
  // Pass 1: each ray's sample count into counts [R], their exclusive prefix
  // sum into offsets [R] (when the total fits: ray_march::TotalSamples),
  // and the total into *total on the host.
  static absl::Status Count(::tensorflow::OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                            int32_t* offsets, int32_t* counts, int64_t* total);
  // Pass 2: the samples of ray r from offsets[r] on (`total` of them in all, > 0).
  static absl::Status Fill(::tensorflow::OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                           const int32_t* offsets, int64_t total, float* t_starts, float* t_ends,
                           int32_t* ray_indices);
  // MetalOpsRayMarchStatic (any R): rays in order while their samples fit in
  // sample_budget, each with all its samples; the others none (count 0,
  // offset num_samples); the samples past num_samples padded
  // (rm_static_pad_ray). The kept samples are RayMarch's first num_samples.
  static absl::Status Static(::tensorflow::OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                             int64_t sample_budget, const RayMarchStaticOutputs& out);
};

// The inputs of both ops (checked by ray_march::Shapes).
inline RayMarchInputs RayMarchInputsOf(::tensorflow::OpKernelContext* ctx) {
  return {ctx->input(0).flat<float>().data(), ctx->input(1).flat<float>().data(), ctx->input(2).flat<float>().data(),
          ctx->input(3).flat<float>().data(), ctx->input(4).flat<uint8_t>().data(),
          // a host-memory input on every device (see the registrations)
          static_cast<uint32_t>(ctx->input(5).scalar<int32_t>()())};
}

inline absl::Status CheckRayMarchShapes(::tensorflow::OpKernelContext* ctx, const ray_march::Attrs& attrs) {
  using checks::DimsOf;
  return checks::ToStatus(ray_march::Shapes(DimsOf(ctx->input(0)), DimsOf(ctx->input(1)), DimsOf(ctx->input(2)),
                                            DimsOf(ctx->input(3)), DimsOf(ctx->input(4)), DimsOf(ctx->input(5)),
                                            attrs));
}

template <typename Device>
class RayMarchOp : public OpKernelWithAttrs<ray_march::Attrs> {
 public:
  using OpKernelWithAttrs<ray_march::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, CheckRayMarchShapes(ctx, attrs_));
    const int64_t rays = ctx->input(0).dim_size(0);
    const RayMarchParams p = ray_march::MakeParams(attrs_, rays, ctx->input(4).dim_size(0));
    ::tensorflow::Tensor *offsets = nullptr, *counts = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, ::tensorflow::TensorShape({rays}), &offsets));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, ::tensorflow::TensorShape({rays}), &counts));
    const RayMarchInputs in = RayMarchInputsOf(ctx);
    int64_t total = 0;
    if (rays > 0) {
      OP_REQUIRES_OK(ctx, RayMarchFunctor<Device>::Count(ctx, p, in, offsets->flat<int32_t>().data(),
                                                         counts->flat<int32_t>().data(), &total));
    }
    OP_REQUIRES_OK(ctx, checks::ToStatus(ray_march::TotalSamples(total)));
    ::tensorflow::Tensor *t_starts = nullptr, *t_ends = nullptr, *ray_indices = nullptr;
    const ::tensorflow::TensorShape samples({total});
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, samples, &t_starts));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, samples, &t_ends));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, samples, &ray_indices));
    if (total == 0) return;
    OP_REQUIRES_OK(ctx, RayMarchFunctor<Device>::Fill(ctx, p, in, offsets->flat<int32_t>().data(), total,
                                                      t_starts->flat<float>().data(), t_ends->flat<float>().data(),
                                                      ray_indices->flat<int32_t>().data()));
  }
};

template <typename Device>
class RayMarchStaticOp : public OpKernelWithAttrs<ray_march::StaticAttrs> {
 public:
  using OpKernelWithAttrs<ray_march::StaticAttrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::TensorShape;
    OP_REQUIRES_OK(ctx, CheckRayMarchShapes(ctx, attrs_.march));
    const int64_t rays = ctx->input(0).dim_size(0), budget = attrs_.sample_budget;
    const TensorShape shapes[7] = {TensorShape({budget}), TensorShape({budget}), TensorShape({budget}),
                                   TensorShape({rays}),   TensorShape({rays}),   TensorShape({}),
                                   TensorShape({})};
    ::tensorflow::Tensor* t[7];
    for (int i = 0; i < 7; ++i) OP_REQUIRES_OK(ctx, ctx->allocate_output(i, shapes[i], &t[i]));
    const RayMarchStaticOutputs out = {t[0]->flat<float>().data(),   t[1]->flat<float>().data(),
                                       t[2]->flat<int32_t>().data(), t[3]->flat<int32_t>().data(),
                                       t[4]->flat<int32_t>().data(), t[5]->flat<int32_t>().data(),
                                       t[6]->flat<int32_t>().data()};
    OP_REQUIRES_OK(ctx, RayMarchFunctor<Device>::Static(
                            ctx, ray_march::MakeParams(attrs_.march, rays, ctx->input(4).dim_size(0)),
                            RayMarchInputsOf(ctx), budget, out));
  }
};

}  // namespace mo

#endif  // MO_KERNELS_RAY_MARCH_RAY_MARCH_KERNEL_H_
