// The base of the C++-API kernel classes (kernels/<op>_kernel.h) whose op has
// attributes: the op's spec (kernels/<op>/<op>_spec.h) reads and checks them.
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

}  // namespace mo

#endif  // MO_KERNELS_FRAMEWORK_OP_KERNEL_WITH_ATTRS_H_
