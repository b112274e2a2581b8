// The TensorFlow kernel classes of the ops that map a tensor point by point
// and of their gradient ops, once for every C++-API device (each such op's
// kernels/<op>/<op>_kernel.h names its classes as
//   PointwiseOp<Functor, T, Attrs, kPointSize, fields...>, PointwiseGradOp<...>).
// A point is kPointSize consecutive elements of x; the forward takes x
// (input 0) and gives y (output 0), n points in order; the gradient op takes
// the upstream gradient and x (inputs 0 and 1) and gives dx, shaped like x.
// The classes read the attributes (Attrs, kernels/<op>/<op>_spec.h), run the
// spec's checks, allocate the output and, for n > 0 points, call
//   Functor::Forward(ctx, x, n, attrs.*fields..., y) or
//   Functor::Backward(ctx, grad, x, n, attrs.*fields..., dx)
// (fields: the attributes the functor takes, in order). The checks are the
// spec's, found by the type of the attributes (as checks::ReadAttrsOf finds
// ReadAttrs): Shapes(attrs, x dims, &y dims) and GradShapes(attrs, grad dims,
// x dims).
#ifndef MO_KERNELS_FRAMEWORK_POINTWISE_KERNEL_H_
#define MO_KERNELS_FRAMEWORK_POINTWISE_KERNEL_H_

#include <cstdint>

#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

// The forward (kGrad false) or the gradient op (kGrad true).
template <typename Functor, typename T, typename Attrs, int64_t kPointSize, bool kGrad, auto... fields>
class PointwiseKernel : public OpKernelWithAttrs<Attrs> {
 public:
  using OpKernelWithAttrs<Attrs>::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    const Attrs& a = this->attrs_;
    const ::tensorflow::Tensor& x = ctx->input(kGrad ? 1 : 0);
    const checks::Dims x_dims = checks::DimsOf(x);
    checks::Dims out_dims = x_dims;
    if constexpr (kGrad) {
      OP_REQUIRES_OK(ctx, checks::ToStatus(GradShapes(a, checks::DimsOf(ctx->input(0)), x_dims)));
    } else {
      OP_REQUIRES_OK(ctx, checks::ToStatus(Shapes(a, x_dims, &out_dims)));
    }
    ::tensorflow::TensorShape out_shape;
    OP_REQUIRES_OK(ctx, ::tensorflow::TensorShape::BuildTensorShape(out_dims, &out_shape));
    ::tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    const int64_t n = x.NumElements() / kPointSize;
    if (n == 0) return;
    const T* x_data = x.flat<T>().data();
    T* out_data = out->flat<T>().data();
    if constexpr (kGrad) {
      OP_REQUIRES_OK(ctx, Functor::Backward(ctx, ctx->input(0).flat<T>().data(), x_data, n, (a.*fields)..., out_data));
    } else {
      OP_REQUIRES_OK(ctx, Functor::Forward(ctx, x_data, n, (a.*fields)..., out_data));
    }
  }
};

template <typename Functor, typename T, typename Attrs, int64_t kPointSize, auto... fields>
using PointwiseOp = PointwiseKernel<Functor, T, Attrs, kPointSize, false, fields...>;
template <typename Functor, typename T, typename Attrs, int64_t kPointSize, auto... fields>
using PointwiseGradOp = PointwiseKernel<Functor, T, Attrs, kPointSize, true, fields...>;

}  // namespace mo

#endif  // MO_KERNELS_FRAMEWORK_POINTWISE_KERNEL_H_
