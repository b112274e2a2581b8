// The TensorFlow kernel classes of the ops that map a tensor point by point
// and of their gradient ops, once for every C++-API device (SceneContract,
// SHEncode, TruncExp). A point is Op::kPointSize consecutive elements of x;
// the forward takes x (input 0) and gives y (output 0), n points in order; the
// gradient op takes the upstream gradient and x (inputs 0 and 1) and gives dx,
// shaped like x. The classes run the spec's checks, allocate the output and
// call the op's functor for n > 0 points. `Op`, in kernels/<op>_kernel.h, names:
//   Attrs                   the attributes (kernels/spec/<op>_spec.h)
//   kPointSize              elements per point
//   Functor<Device, T>      Forward(ctx, x, n, args..., y) and
//                           Backward(ctx, grad, x, n, args..., dx)
//   FunctorArgs(attrs)      args..., the attributes the functor takes, as a tuple
// The checks are the spec's, found by the type of the attributes (as
// checks::ReadAttrsOf finds ReadAttrs): Shapes(attrs, x dims, &y dims) and
// GradShapes(attrs, grad dims, x dims).
#ifndef MO_KERNELS_POINTWISE_KERNEL_H_
#define MO_KERNELS_POINTWISE_KERNEL_H_

#include <cstdint>
#include <tuple>

#include "kernels/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

// The forward (kGrad false) or the gradient op (kGrad true) of Op.
template <typename Device, typename T, typename Op, bool kGrad>
class PointwiseKernel : public OpKernelWithAttrs<typename Op::Attrs> {
 public:
  using OpKernelWithAttrs<typename Op::Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const ::tensorflow::Tensor& x = ctx->input(kGrad ? 1 : 0);
    const checks::Dims x_dims = checks::DimsOf(x);
    checks::Dims out_dims = x_dims;
    if constexpr (kGrad) {
      OP_REQUIRES_OK(ctx, checks::ToStatus(GradShapes(this->attrs_, checks::DimsOf(ctx->input(0)), x_dims)));
    } else {
      OP_REQUIRES_OK(ctx, checks::ToStatus(Shapes(this->attrs_, x_dims, &out_dims)));
    }
    ::tensorflow::TensorShape out_shape;
    OP_REQUIRES_OK(ctx, ::tensorflow::TensorShape::BuildTensorShape(out_dims, &out_shape));
    ::tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    const int64_t n = x.NumElements() / Op::kPointSize;
    if (n == 0) return;
    using Functor = typename Op::template Functor<Device, T>;
    const T* x_data = x.flat<T>().data();
    T* out_data = out->flat<T>().data();
    const auto call = [&](auto... args) {
      if constexpr (kGrad) {
        return Functor::Backward(ctx, ctx->input(0).flat<T>().data(), x_data, n, args..., out_data);
      } else {
        return Functor::Forward(ctx, x_data, n, args..., out_data);
      }
    };
    OP_REQUIRES_OK(ctx, std::apply(call, Op::FunctorArgs(this->attrs_)));
  }
};

template <typename Device, typename T, typename Op>
using PointwiseOp = PointwiseKernel<Device, T, Op, false>;
template <typename Device, typename T, typename Op>
using PointwiseGradOp = PointwiseKernel<Device, T, Op, true>;

}  // namespace mo

#endif  // MO_KERNELS_POINTWISE_KERNEL_H_
