// The CUDA handlers of the XLA kernels of MetalOpsDistortionLoss /
// MetalOpsDistortionLossGrad (kernels/distortion_loss/distortion_loss_xla.cc): the GPU
// kernel's launches with its check that t is sorted
// (kernels/distortion_loss/distortion_loss_gpu.h) on XLA's stream, the check's device
// word from XLA's scratch allocator. The check reads the first bad ray back
// with a synchronous copy on XLA's stream (as the GPU kernel does on
// TensorFlow's), so unsorted t is an XLA error with the CPU kernel's message.
// Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/distortion_loss/distortion_loss_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer w, ffi::AnyBuffer t,
                   RetBuffer loss) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return LaunchWithCheckWords(scratch, 1, "DistortionLoss", [&](unsigned long long* word) {
    return cuda::DistortionLossForward(Data<float>(w), Data<float>(t), rays, samples, Data<float>(loss), word, stream);
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad, ffi::AnyBuffer w,
                    ffi::AnyBuffer t, RetBuffer grad_w, RetBuffer grad_t) {
  const int64_t rays = w.dimensions()[0], samples = w.dimensions()[1];
  if (rays == 0) return ffi::Error::Success();
  return LaunchWithCheckWords(scratch, 1, "DistortionLossGrad", [&](unsigned long long* word) {
    return cuda::DistortionLossBackward(Data<float>(grad), Data<float>(w), Data<float>(t), rays, samples,
                                        Data<float>(grad_w), Data<float>(grad_t), word, stream);
  });
}

MO_XLA_FFI_HANDLER("MetalOpsDistortionLoss", "CUDA", Forward, BindStreamScratchBuffers<2, 1>());
MO_XLA_FFI_HANDLER("MetalOpsDistortionLossGrad", "CUDA", Backward, BindStreamScratchBuffers<3, 2>());

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
