// The XLA kernels of MetalOpsSHEncode / MetalOpsSHEncodeGrad
// (kernels/xla/xla_kernel.h) and their host handler: the CPU functor of
// kernels/sh_encode/sh_encode_functor.h. CUDA handler: kernels/sh_encode/sh_encode_xla_gpu.cc.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/sh_encode/sh_encode_functor.h"
#include "kernels/sh_encode/sh_encode_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileSHEncode(XlaOpKernelContext* ctx, const sh_encode::Attrs& attrs) {
  const checks::Dims dirs = InputDims(ctx, 0);
  OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::DirsShape(dirs)));
  EmitFfiCall(ctx, "MetalOpsSHEncode", {ctx->Input(0)},
              {ArrayShape(ElementType(ctx, 0), sh_encode::OutputDims(dirs, attrs.degree))},
              FfiAttrs().Int("degree", attrs.degree));
}

void CompileSHEncodeGrad(XlaOpKernelContext* ctx, const sh_encode::Attrs& attrs) {
  const checks::Dims dirs = InputDims(ctx, 1);
  OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::DirsShape(dirs)));
  OP_REQUIRES_OK(ctx, checks::ToStatus(sh_encode::GradShape(InputDims(ctx, 0), dirs, attrs.degree)));
  EmitFfiCall(ctx, "MetalOpsSHEncodeGrad", InputsUpTo(ctx, 2), {ShapeLike(ctx, 1)},
              FfiAttrs().Int("degree", attrs.degree));
}

using SHEncodeXlaOp = XlaOpWithAttrs<sh_encode::Attrs, CompileSHEncode>;
using SHEncodeGradXlaOp = XlaOpWithAttrs<sh_encode::Attrs, CompileSHEncodeGrad>;
MO_REGISTER_XLA_OP(Name("MetalOpsSHEncode").TypeConstraint("T", kFloatTypes), SHEncodeXlaOp);
MO_REGISTER_XLA_OP(Name("MetalOpsSHEncodeGrad").TypeConstraint("T", kFloatTypes), SHEncodeGradXlaOp);

// The directions [N, 3]: N.
int64_t Count(const ffi::AnyBuffer& dirs) { return static_cast<int64_t>(dirs.element_count()) / 3; }

ffi::Error Forward(ffi::AnyBuffer dirs, RetBuffer values, int64_t degree) {
  const int64_t n = Count(dirs);
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncode", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(SHEncodeFunctor<Eigen::ThreadPoolDevice, T>::Forward(
        HostContext(), Data<T>(dirs), n, static_cast<int>(degree), Data<T>(values)));
  });
}

ffi::Error Backward(ffi::AnyBuffer grad, ffi::AnyBuffer dirs, RetBuffer grad_dirs, int64_t degree) {
  const int64_t n = Count(dirs);
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(dirs.element_type(), n, "SHEncodeGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(SHEncodeFunctor<Eigen::ThreadPoolDevice, T>::Backward(
        HostContext(), Data<T>(grad), Data<T>(dirs), n, static_cast<int>(degree), Data<T>(grad_dirs)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsSHEncode", "Host", Forward, xla_ffi::BindBuffers<1, 1>().Attr<int64_t>("degree"));
MO_XLA_FFI_HANDLER("MetalOpsSHEncodeGrad", "Host", Backward, xla_ffi::BindBuffers<2, 1>().Attr<int64_t>("degree"));

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
