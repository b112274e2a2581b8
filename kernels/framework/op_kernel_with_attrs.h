// The base of the C++-API kernel classes (kernels/<op>_kernel.h) whose op has
// attributes: the op's spec (kernels/<op>/<op>_spec.h) reads and checks them;
// and the kernel classes' output allocation.
#ifndef MO_KERNELS_FRAMEWORK_OP_KERNEL_WITH_ATTRS_H_
#define MO_KERNELS_FRAMEWORK_OP_KERNEL_WITH_ATTRS_H_

#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

// Reads and checks the attributes once, at construction, into attrs_
// (checks::ReadAttrsOf(ctx, args..., &attrs_); the Metal kernels' twin is
// mo::metal::CreateWithAttrs).
template <typename Attrs, auto... args>
class OpKernelWithAttrs : public ::tensorflow::OpKernel {
 public:
  explicit OpKernelWithAttrs(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, args..., &attrs_));
  }

 protected:
  Attrs attrs_;
};

// Allocates output `index` of `shape`; its elements into *data.
template <typename T>
absl::Status AllocateOutput(::tensorflow::OpKernelContext* ctx, int index, const ::tensorflow::TensorShape& shape,
                            T** data) {
  ::tensorflow::Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  *data = out->flat<T>().data();
  return absl::OkStatus();
}

}  // namespace mo

#endif  // MO_KERNELS_FRAMEWORK_OP_KERNEL_WITH_ATTRS_H_
