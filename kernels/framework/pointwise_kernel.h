// The TensorFlow kernel classes of the ops that map a tensor point by point
// and of their gradient ops, once for every C++-API device (each such
// op's <op>_cpu.cc and <op>_cuda.cc register
//   PointwiseOp<Functor, T, Attrs, kPointSize>, PointwiseGradOp<...>
// with MO_REGISTER_POINTWISE). A point is kPointSize consecutive elements of
// x; the forward takes x (input 0) and gives y (output 0), n points in order;
// the gradient op takes the upstream gradient and x (inputs 0 and 1) and
// gives dx, shaped like x. The classes read the attributes (the op's Attrs,
// kernels/spec/op_attrs.h), run the op's checks, allocate the output and, for
// n > 0 points, call
//   Functor::Forward(ctx, x, n, attrs, y) or
//   Functor::Backward(ctx, grad, x, n, attrs, dx).
// The checks are the op's, found by the type of the attributes (as
// checks::ReadAttrsOf finds ReadAttrs): Shapes(attrs, x dims, &y dims) and
// GradShapes(attrs, grad dims, x dims).
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
template <typename Functor, typename T, typename Attrs, int64_t kPointSize, bool kGrad>
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
      OP_REQUIRES_OK(ctx, Functor::Backward(ctx, ctx->input(0).flat<T>().data(), x_data, n, a, out_data));
    } else {
      OP_REQUIRES_OK(ctx, Functor::Forward(ctx, x_data, n, a, out_data));
    }
  }
};

template <typename Functor, typename T, typename Attrs, int64_t kPointSize>
using PointwiseOp = PointwiseKernel<Functor, T, Attrs, kPointSize, false>;
template <typename Functor, typename T, typename Attrs, int64_t kPointSize>
using PointwiseGradOp = PointwiseKernel<Functor, T, Attrs, kPointSize, true>;

}  // namespace mo

// Op NAME and its gradient op NAME "Grad" on DEVICE (DEVICE_CPU, DEVICE_GPU),
// T float and Eigen::half: PointwiseOp<FUNCTOR<T>, T, NS::Attrs, NS::kPointSize>
// and PointwiseGradOp<...>, NS the op's namespace (mo::<op>).
#define MO_REGISTER_POINTWISE(NAME, DEVICE, FUNCTOR, NS)        \
  MO_REGISTER_POINTWISE_T(NAME, DEVICE, FUNCTOR, NS, float);    \
  MO_REGISTER_POINTWISE_T(NAME, DEVICE, FUNCTOR, NS, ::Eigen::half)
#define MO_REGISTER_POINTWISE_T(NAME, DEVICE, FUNCTOR, NS, T)                                               \
  MO_REGISTER_POINTWISE_FORWARD(NAME, DEVICE, FUNCTOR, NS, T);                                                 \
  REGISTER_KERNEL_BUILDER(Name(NAME "Grad").Device(::tensorflow::DEVICE).TypeConstraint<T>("T"), \
                          ::mo::PointwiseGradOp<FUNCTOR<T>, T, NS::Attrs, NS::kPointSize>)
// Op NAME alone (an op with no gradient op of its own) on DEVICE for T:
// PointwiseOp<FUNCTOR<T>, T, NS::Attrs, NS::kPointSize>.
#define MO_REGISTER_POINTWISE_FORWARD(NAME, DEVICE, FUNCTOR, NS, T)                \
  REGISTER_KERNEL_BUILDER(Name(NAME).Device(::tensorflow::DEVICE).TypeConstraint<T>("T"), \
                          ::mo::PointwiseOp<FUNCTOR<T>, T, NS::Attrs, NS::kPointSize>)

#endif  // MO_KERNELS_FRAMEWORK_POINTWISE_KERNEL_H_
