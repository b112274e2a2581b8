// The TensorFlow kernel of MetalOpsRayMarch, once for every C++-API device
// (one kernel class templated on the device, a functor per device): the
// attributes and checks of kernels/spec/ray_march_spec.h, the output allocation
// between the two passes here; RayMarchFunctor<Device> does the work:
//   CPU  kernels/cpu/ray_march_kernels.cc (registers RayMarchOp<CPUDevice>)
//   CUDA kernels/cuda/ray_march_gpu.cc    (registers RayMarchOp<GPUDevice>)
// The number of samples decides the outputs' shapes, so the first pass's
// total reaches the host before the outputs are allocated.
#ifndef MO_KERNELS_RAY_MARCH_KERNEL_H_
#define MO_KERNELS_RAY_MARCH_KERNEL_H_

#include <cstdint>

#include "kernels/common/ray_march.h"
#include "kernels/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/ray_march_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace mo {

// Defined per device, for R > 0.
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
};

template <typename Device>
class RayMarchOp : public OpKernelWithAttrs<ray_march::Attrs> {
 public:
  using OpKernelWithAttrs<ray_march::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using checks::DimsOf;
    const ::tensorflow::Tensor& origins = ctx->input(0);
    const ::tensorflow::Tensor& directions = ctx->input(1);
    const ::tensorflow::Tensor& near = ctx->input(2);
    const ::tensorflow::Tensor& far = ctx->input(3);
    const ::tensorflow::Tensor& occupancy = ctx->input(4);
    const ::tensorflow::Tensor& seed = ctx->input(5);
    OP_REQUIRES_OK(ctx, checks::ToStatus(ray_march::Shapes(DimsOf(origins), DimsOf(directions), DimsOf(near),
                                                           DimsOf(far), DimsOf(occupancy), DimsOf(seed), attrs_)));
    const int64_t rays = origins.dim_size(0);
    const RayMarchParams p = ray_march::MakeParams(attrs_, rays, occupancy.dim_size(0));
    ::tensorflow::Tensor *offsets = nullptr, *counts = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, ::tensorflow::TensorShape({rays}), &offsets));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, ::tensorflow::TensorShape({rays}), &counts));
    const RayMarchInputs in{origins.flat<float>().data(), directions.flat<float>().data(), near.flat<float>().data(),
                            far.flat<float>().data(), occupancy.flat<uint8_t>().data(),
                            // a host-memory input on every device (see the registrations)
                            static_cast<uint32_t>(seed.scalar<int32_t>()())};
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

}  // namespace mo

#endif  // MO_KERNELS_RAY_MARCH_KERNEL_H_
