// The CUDA functor of MetalOpsVolumeRender / MetalOpsVolumeRenderGrad (the
// kernel class is kernels/volume_render_kernel.h) and its GPU registration.
// Compiled only when the installed TensorFlow is a CUDA build: the Makefile
// then defines GOOGLE_CUDA and links kernels/cuda/volume_render.cu.cc. The
// launchers are tested through the harness (tests/cuda).
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <vector>

#include "kernels/common/volume_render.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/cuda/volume_render.h"
#include "kernels/volume_render_kernel.h"
#include "kernels/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/volume_render_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace mo {

template <typename T>
struct VolumeRenderFunctor<GPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const VolumeRenderForwardArgs<T>& a) {
    using ::tensorflow::Tensor;
    const int64_t S = a.samples;
    // Two device words record the first invalid ray (sigma, t); read back once.
    Tensor bad_tensor;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({2}), &bad_tensor));
    auto* bad = reinterpret_cast<unsigned long long*>(bad_tensor.flat<int64_t>().data());
    const cudaStream_t stream = cuda::Stream(ctx);
    cudaError_t err = cudaMemsetAsync(bad, 0xFF, 2 * sizeof(unsigned long long), stream);
    if (err == cudaSuccess) err = cuda::LaunchVolumeRenderForward<T>(a, bad, stream);
    unsigned long long host_bad[2] = {0, 0};
    if (err == cudaSuccess) err = cuda::CopyToHost(host_bad, bad, sizeof(host_bad), stream);
    TF_RETURN_IF_ERROR(cuda::LaunchStatus("MetalOpsVolumeRender", err));
    for (int which = 0; which < 2; ++which) {
      if (host_bad[which] == ~0ull) continue;
      // The bad ray's samples, on the host, for the CPU kernel's message.
      const int64_t r = static_cast<int64_t>(host_bad[which]);
      std::vector<T> sigma_row(S), t_row(S + 1);
      err = cuda::CopyToHost(sigma_row.data(), a.sigma + r * S, S * sizeof(T), stream);
      if (err == cudaSuccess) err = cuda::CopyToHost(t_row.data(), a.t + r * (S + 1), (S + 1) * sizeof(T), stream);
      TF_RETURN_IF_ERROR(cuda::CudaStatus("MetalOpsVolumeRender CUDA check", err));
      const VrCheck check = vr_check_ray(sigma_row.data(), t_row.data(), S);
      return checks::ToStatus(volume_render::BadRay(check, r, sigma_row.data(), t_row.data()));
    }
    return absl::OkStatus();
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const VolumeRenderBackwardArgs<T>& a) {
    return cuda::LaunchStatus("MetalOpsVolumeRenderGrad", cuda::LaunchVolumeRenderBackward<T>(a, cuda::Stream(ctx)));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsVolumeRender", VolumeRender, DEVICE_GPU, GPUDevice, double);

}  // namespace mo

#endif  // GOOGLE_CUDA
