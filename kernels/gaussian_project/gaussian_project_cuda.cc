// GaussianProject on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsGaussianProject / MetalOpsGaussianProjectGrad (the kernel class of
// gaussian_project.h over the CUDA functor below), running the launchers of
// gaussian_project.cu.cc. The forward first checks the Gaussians' values: a
// check kernel finds the first refused Gaussian on the device, one 8-byte
// copy to the host (a synchronisation of the stream per call) reads it back,
// and only on failure that Gaussian's values are copied for the CPU kernel's
// message (gaussian_project.h GaussianValues). Compiled only when the
// installed TensorFlow is a CUDA build (and into `make cuda-lib`); here
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

using ::tensorflow::OpKernelContext;

namespace {

// The error naming the first Gaussian whose values are refused; OK when none is.
absl::Status CheckValues(OpKernelContext* ctx, const float* means, const float* quats, const float* scales,
                         int64_t n) {
  const cudaStream_t stream = cuda::Stream(ctx);
  ::tensorflow::Tensor word;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), &word));
  auto* dev = reinterpret_cast<unsigned long long*>(word.flat<int64_t>().data());
  cudaError_t err = cuda::LaunchGaussianProjectCheck(means, quats, scales, n, dev, stream);
  unsigned long long host = 0;
  if (err == cudaSuccess) err = cuda::CopyToHost(&host, dev, sizeof(host), stream);
  TF_RETURN_IF_ERROR(cuda::CudaStatus("GaussianProject CUDA check", err));
  if (host >= static_cast<unsigned long long>(n)) return absl::OkStatus();
  const int64_t i = static_cast<int64_t>(host);
  float mean[3], quat[4], scale[3];
  err = cuda::CopyToHost(mean, means + 3 * i, sizeof(mean), stream);
  if (err == cudaSuccess) err = cuda::CopyToHost(quat, quats + 4 * i, sizeof(quat), stream);
  if (err == cudaSuccess) err = cuda::CopyToHost(scale, scales + 3 * i, sizeof(scale), stream);
  TF_RETURN_IF_ERROR(cuda::CudaStatus("GaussianProject CUDA check", err));
  return checks::ToStatus(gaussian_project::GaussianValues(i, mean, quat, scale));
}

}  // namespace

template <>
struct GaussianProjectFunctor<GPUDevice> {
  static absl::Status Forward(OpKernelContext* ctx, const float* means, const float* quats, const float* scales,
                              const float* viewmat, const float* k, int64_t n, const gaussian_project::Attrs& a,
                              float* means2d, float* conics, float* depths, int32_t* radii) {
    TF_RETURN_IF_ERROR(CheckValues(ctx, means, quats, scales, n));
    return cuda::LaunchStatus("GaussianProject", cuda::LaunchGaussianProjectForward(
                                                     means, quats, scales, viewmat, k, n, a, means2d, conics,
                                                     depths, radii, cuda::Stream(ctx)));
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
#endif  // GOOGLE_CUDA
