// The XLA kernel of ZeroOut (kernels/xla/xla_kernel.h) and its host handler:
// the CPU functor of kernels/cpu/zero_out_cpu.h.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/tf_eigen.h

#include <cstdint>

#include "kernels/cpu/zero_out_cpu.h"
#include "kernels/spec/zero_out_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

class ZeroOutXlaOp : public XlaOpKernel {
 public:
  explicit ZeroOutXlaOp(::tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, checks::ReadAttrsOf(ctx, &attrs_));
  }
  void Compile(XlaOpKernelContext* ctx) override {
    const checks::Dims dims = InputDims(ctx, 0);
    OP_REQUIRES_OK(ctx, checks::ToStatus(zero_out::PreserveIndex(attrs_.preserve_index, ctx->InputShape(0).num_elements())));
    EmitFfiCall(ctx, "ZeroOut", {ctx->Input(0)}, {ArrayShape(ElementType(ctx, 0), dims)},
                FfiAttrs().Int("preserve_index", attrs_.preserve_index));
  }

 private:
  zero_out::Attrs attrs_;
};

constexpr ::tensorflow::DataType kTypes[] = {::tensorflow::DT_INT32, ::tensorflow::DT_INT64, ::tensorflow::DT_FLOAT,
                                             ::tensorflow::DT_DOUBLE};
MO_REGISTER_XLA_OP(Name("ZeroOut").TypeConstraint("T", kTypes), ZeroOutXlaOp);

namespace ffi = ::xla::ffi;
using xla_ffi::Data;

ffi::Error Compute(ffi::AnyBuffer in, ffi::Result<ffi::AnyBuffer> out, int64_t preserve_index) {
  return xla_ffi::ForType<int32_t, int64_t, float, double>(in.element_type(), "ZeroOut", [&](auto type) {
    using T = decltype(type);
    const int64_t n = static_cast<int64_t>(in.element_count());
    if (n == 0) return ffi::Error::Success();
    return xla_ffi::ToError(ZeroOutFunctor<Eigen::ThreadPoolDevice, T>::Compute(HostContext(), Data<T>(in),
                                                                                 Data<T>(out), n, preserve_index));
  });
}

XLA_FFI_DEFINE_HANDLER(kCompute, Compute,
                       ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Attr<int64_t>("preserve_index"));
MO_REGISTER_XLA_FFI_HANDLER("ZeroOut", "Host", kCompute);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
