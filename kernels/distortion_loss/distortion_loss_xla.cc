// The XLA kernels of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad
// (kernels/xla/xla_kernel.h) and their host handlers: the CPU functor of
// kernels/distortion_loss/distortion_loss_functor.h. The shape checks run while XLA compiles;
// the check that t is sorted along every ray runs in the handler (as in the
// CPU kernel) and comes back as an XLA error naming the ray.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/distortion_loss/distortion_loss_functor.h"
#include "kernels/distortion_loss/distortion_loss_spec.h"

namespace mo {
namespace xla_kernels {
namespace {

void CompileDistortionLoss(XlaOpKernelContext* ctx) {
  const checks::Dims w = InputDims(ctx, 0);
  OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::Shapes(w, InputDims(ctx, 1))));
  EmitFfiCall(ctx, "MetalOpsDistortionLoss", InputsUpTo(ctx, 2), {ArrayShape(::xla::F32, {w[0]})});
}

void CompileDistortionLossGrad(XlaOpKernelContext* ctx) {
  const checks::Dims w = InputDims(ctx, 1), t = InputDims(ctx, 2);
  OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::Shapes(w, t)));
  OP_REQUIRES_OK(ctx, checks::ToStatus(distortion_loss::GradShape(InputDims(ctx, 0), w[0])));
  EmitFfiCall(ctx, "MetalOpsDistortionLossGrad", InputsUpTo(ctx, 3),
              {ArrayShape(::xla::F32, w), ArrayShape(::xla::F32, t)});
}

MO_REGISTER_XLA_OP(Name("MetalOpsDistortionLoss"), XlaOp<CompileDistortionLoss>);
MO_REGISTER_XLA_OP(Name("MetalOpsDistortionLossGrad"), XlaOp<CompileDistortionLossGrad>);

using Functor = DistortionLossFunctor<Eigen::ThreadPoolDevice>;

ffi::Error Forward(ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> t, ffi::ResultBuffer<ffi::F32> loss) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return xla_ffi::ToError(Functor::Forward(HostContext(), w.typed_data(), t.typed_data(), rays, samples,
                                           loss->typed_data()));
}

ffi::Error Backward(ffi::Buffer<ffi::F32> grad, ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> t,
                    ffi::ResultBuffer<ffi::F32> grad_w, ffi::ResultBuffer<ffi::F32> grad_t) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return xla_ffi::ToError(Functor::Backward(HostContext(), grad.typed_data(), w.typed_data(), t.typed_data(), rays,
                                            samples, grad_w->typed_data(), grad_t->typed_data()));
}

MO_XLA_FFI_HANDLER("MetalOpsDistortionLoss", "Host", Forward, xla_ffi::BindBuffers<2, 1, ffi::Buffer<ffi::F32>>());
MO_XLA_FFI_HANDLER("MetalOpsDistortionLossGrad", "Host", Backward, xla_ffi::BindBuffers<3, 2, ffi::Buffer<ffi::F32>>());

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
