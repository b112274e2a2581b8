// The CUDA functor of MetalOpsRayMarch (the kernel class is
// kernels/ray_march/ray_march_kernel.h) and its GPU registration. Compiled only when the
// installed TensorFlow is a CUDA build; here it is syntax-checked by
// `make cuda-check`. Launchers: kernels/ray_march/ray_march.cu.cc.
//
// The sample count decides the outputs' shapes: the first pass's total is
// copied to the host (one stream synchronisation per call) before the kernel
// class allocates them. The seed is a host-memory input.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/ray_march/ray_march_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/ray_march/ray_march_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using ::tensorflow::OpKernelContext;

using GPUDevice = Eigen::GpuDevice;

template <>
struct RayMarchFunctor<GPUDevice> {
  static absl::Status Count(OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                            int32_t* offsets, int32_t* counts, int64_t* total) {
    const cudaStream_t stream = cuda::Stream(ctx);
    const size_t scratch_bytes = cuda::RayMarchCountScratchBytes(p.num_rays);
    ::tensorflow::Tensor scratch, device_total;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(
        ::tensorflow::DT_INT8, ::tensorflow::TensorShape({static_cast<int64_t>(scratch_bytes)}), &scratch));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), &device_total));
    auto* dev_total = reinterpret_cast<long long*>(device_total.flat<int64_t>().data());
    cudaError_t err = cuda::LaunchRayMarchCount(p, in, counts, offsets, dev_total,
                                                scratch.flat<int8_t>().data(), scratch_bytes, stream);
    TF_RETURN_IF_ERROR(cuda::LaunchStatus("RayMarch count", err));
    long long host_total = 0;
    TF_RETURN_IF_ERROR(
        cuda::CudaStatus("RayMarch total copy", cuda::CopyToHost(&host_total, dev_total, sizeof(host_total), stream)));
    *total = host_total;
    return absl::OkStatus();
  }

  static absl::Status Fill(OpKernelContext* ctx, const RayMarchParams& p, const RayMarchInputs& in,
                           const int32_t* offsets, int64_t /*total*/, float* t_starts, float* t_ends,
                           int32_t* ray_indices) {
    const cudaStream_t stream = cuda::Stream(ctx);
    return cuda::LaunchStatus("RayMarch fill", cuda::LaunchRayMarchFill(p, in, offsets, t_starts,
                                                                         t_ends, ray_indices, stream));
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsRayMarch").Device(::tensorflow::DEVICE_GPU).HostMemory("seed"),
                        RayMarchOp<GPUDevice>);

}  // namespace mo

#endif  // GOOGLE_CUDA
