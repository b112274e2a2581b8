// The CPU registrations of MetalOpsDistortionLoss / MetalOpsDistortionLossGrad:
// the kernel class kernels/distortion_loss/distortion_loss_kernel.h with the CPU functor of
// kernels/distortion_loss/distortion_loss_functor.h (with XLA's host handlers: kernels/xla/xla_host.h).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/distortion_loss/distortion_loss_functor.h"
#include "kernels/distortion_loss/distortion_loss_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "kernels/xla/xla_host.h"  // MO_XLA

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLoss").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsDistortionLossGrad").Device(::tensorflow::DEVICE_CPU),
                        DistortionLossGradOp<CPUDevice>);


}  // namespace mo

#if MO_XLA
// XLA's host handlers of the same functor, for the calls kernels/distortion_loss/distortion_loss_xla.cc emits.
namespace mo::xla_kernels {
namespace {

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
}  // namespace mo::xla_kernels
#endif  // MO_XLA
