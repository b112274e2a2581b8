// GaussianProject on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsGaussianProject / MetalOpsGaussianProjectGrad (the kernel class of
// gaussian_project.h over the CUDA functor below), running the launchers of
// gaussian_project.cu.cc. The forward first checks the Gaussians' values: a
// check kernel finds the first refused Gaussian on the device, one 8-byte
// copy to the host (a synchronisation of the stream per call) reads it back,
// and only on failure that Gaussian's values are copied for the CPU kernel's
// message (gaussian_project.h GaussianValues); and XLA's CUDA handlers on
// the same launches, for the calls gaussian_project_xla.cc emits. Compiled
// only when the installed TensorFlow is a CUDA build (and into `make cuda-lib`); here
// `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before gaussian_project.h: its kernel class
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // gaussian_project.h's kernel class
#include "kernels/gaussian_project/gaussian_project.h"

namespace mo {
namespace cuda {
namespace {

// The error naming the first Gaussian whose values are refused; OK when none
// is. `word`: one 8-byte word of device scratch from the caller's allocator.
absl::Status GaussianProjectCheckValues(const float* means, const float* quats, const float* scales, int64_t n,
                                        unsigned long long* word, cudaStream_t stream) {
  cudaError_t err = LaunchGaussianProjectCheck(means, quats, scales, n, word, stream);
  unsigned long long host = 0;
  if (err == cudaSuccess) err = CopyToHost(&host, word, sizeof(host), stream);
  TF_RETURN_IF_ERROR(CudaStatus("GaussianProject CUDA check", err));
  if (host >= static_cast<unsigned long long>(n)) return absl::OkStatus();
  const int64_t i = static_cast<int64_t>(host);
  float mean[3], quat[4], scale[3];
  err = CopyToHost(mean, means + 3 * i, sizeof(mean), stream);
  if (err == cudaSuccess) err = CopyToHost(quat, quats + 4 * i, sizeof(quat), stream);
  if (err == cudaSuccess) err = CopyToHost(scale, scales + 3 * i, sizeof(scale), stream);
  TF_RETURN_IF_ERROR(CudaStatus("GaussianProject CUDA check", err));
  return checks::ToStatus(gaussian_project::GaussianValues(i, mean, quat, scale));
}

// The forward with its check, shared by the GPU kernel and the XLA CUDA handler.
absl::Status GaussianProjectForward(const float* means, const float* quats, const float* scales,
                                    const float* opacities, const float* viewmat, const float* k, int64_t n,
                                    const gaussian_project::Attrs& a, float* means2d, float* conics, float* depths,
                                    int32_t* radii, unsigned long long* word, cudaStream_t stream) {
  TF_RETURN_IF_ERROR(GaussianProjectCheckValues(means, quats, scales, n, word, stream));
  return LaunchStatus("GaussianProject", LaunchGaussianProjectForward(means, quats, scales, opacities, viewmat, k, n, a,
                                                                      means2d, conics, depths, radii, stream));
}

}  // namespace
}  // namespace cuda

using ::tensorflow::OpKernelContext;

template <>
struct GaussianProjectFunctor<GPUDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const float* means, const float* quats, const float* scales,
                              const float* opacities, const float* viewmat, const float* k, int64_t n,
                              const gaussian_project::Attrs& a, float* means2d, float* conics, float* depths,
                              int32_t* radii) {
    ::tensorflow::Tensor word;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), &word));
    return cuda::GaussianProjectForward(means, quats, scales, opacities, viewmat, k, n, a, means2d, conics, depths,
                                        radii,
                                        reinterpret_cast<unsigned long long*>(word.flat<int64_t>().data()),
                                        cuda::Stream(ctx));
  }

  static absl::Status Backward(OpKernelContext* ctx, const float* grad_means2d, const float* grad_conics,
                               const float* grad_depths, const float* means, const float* quats,
                               const float* scales, const float* viewmat, const float* k, const int32_t* radii,
                               int64_t n, const gaussian_project::Attrs& a, float* grad_means, float* grad_quats,
                               float* grad_scales) {
    return cuda::LaunchStatus("GaussianProjectGrad",
                              cuda::LaunchGaussianProjectBackward(grad_means2d, grad_conics, grad_depths, means,
                                                                  quats, scales, viewmat, k, radii, n, a, grad_means,
                                                                  grad_quats, grad_scales, cuda::Stream(ctx)));
  }
};

}  // namespace mo

MO_REGISTER_GAUSSIAN_PROJECT(DEVICE_GPU, ::mo::GPUDevice);

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"

MO_XLA_FFI_ATTRS(::mo::gaussian_project::Attrs);

// XLA's CUDA handlers: the attributes bound whole (kernels/xla/xla_ffi.h);
// the forward's check word from XLA's scratch allocator, its first refused
// Gaussian read back with a synchronous copy on XLA's stream.
namespace mo::xla_ffi {
namespace {

using gaussian_project::Attrs;

ffi::Error GaussianProjectXlaForward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer means,
                                     ffi::AnyBuffer quats, ffi::AnyBuffer scales, ffi::AnyBuffer opacities,
                                     ffi::AnyBuffer viewmat,
                                     ffi::AnyBuffer k, RetBuffer means2d, RetBuffer conics, RetBuffer depths,
                                     RetBuffer radii, Attrs a) {
  const int64_t n = static_cast<int64_t>(means.element_count()) / 3;
  if (n == 0) return ffi::Error::Success();
  return LaunchWithCheckWords(scratch, 1, "GaussianProject", [&](unsigned long long* word) {
    return cuda::GaussianProjectForward(Data<float>(means), Data<float>(quats), Data<float>(scales),
                                        Data<float>(opacities), Data<float>(viewmat), Data<float>(k), n, a,
                                        Data<float>(means2d), Data<float>(conics), Data<float>(depths),
                                        Data<int32_t>(radii), word, stream);
  });
}

ffi::Error GaussianProjectXlaBackward(cudaStream_t stream, ffi::AnyBuffer grad_means2d, ffi::AnyBuffer grad_conics,
                                      ffi::AnyBuffer grad_depths, ffi::AnyBuffer means, ffi::AnyBuffer quats,
                                      ffi::AnyBuffer scales, ffi::AnyBuffer viewmat, ffi::AnyBuffer k,
                                      ffi::AnyBuffer radii, RetBuffer grad_means, RetBuffer grad_quats,
                                      RetBuffer grad_scales, Attrs a) {
  const int64_t n = static_cast<int64_t>(means.element_count()) / 3;
  return ToError(cuda::LaunchStatus(
      "GaussianProjectGrad",
      cuda::LaunchGaussianProjectBackward(Data<float>(grad_means2d), Data<float>(grad_conics),
                                          Data<float>(grad_depths), Data<float>(means), Data<float>(quats),
                                          Data<float>(scales), Data<float>(viewmat), Data<float>(k),
                                          Data<int32_t>(radii), n, a, Data<float>(grad_means),
                                          Data<float>(grad_quats), Data<float>(grad_scales), stream)));
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianProject", "CUDA", GaussianProjectXlaForward,
                   BindStreamScratchBuffers<6, 4>().Attrs<Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsGaussianProjectGrad", "CUDA", GaussianProjectXlaBackward,
                   BindStreamBuffers<9, 3>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
