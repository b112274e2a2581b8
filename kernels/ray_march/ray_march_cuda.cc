// RayMarch on CUDA through TensorFlow: the TF GPU kernel of MetalOpsRayMarch
// (the kernel class of ray_march.h over the CUDA functor below) and XLA's
// CUDA handler of MetalOpsRayMarchStatic, for the calls ray_march_xla.cc
// emits; both run the launchers of ray_march.cu.cc on the op's stream.
// Compiled only when the installed TensorFlow is a CUDA build (and into
// `make cuda-lib`); here `make cuda-check` syntax-checks it.
//
// The sample count decides RayMarch's outputs' shapes: the first pass's total
// is copied to the host (one stream synchronisation per call) before the
// kernel class allocates them. The seed is a host-memory input. Under XLA,
// RayMarchStatic's rays kept, layout, counts and padding are worked out on
// the device (cuda::LaunchRayMarchStatic): no read-back, no synchronisation
// of XLA's stream; the seed stays in device memory (XLA keeps every operand
// there) and the kernels read it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before ray_march.h: its kernel classes
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#if MO_XLA
#include "kernels/xla/xla_ffi.h"  // before ray_march.h: its XLA handlers' helpers
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"
#endif
#define MO_TF_KERNEL  // ray_march.h's kernel classes
#include "kernels/ray_march/ray_march.h"

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

#if MO_XLA
MO_XLA_FFI_ATTRS(::mo::ray_march::StaticAttrs);

// XLA's CUDA handler: the attributes bound whole (kernels/xla/xla_ffi.h), the
// buffers' shapes checked, as in the host handler.
namespace mo::xla_ffi {
namespace {

using ray_march::StaticAttrs;

ffi::Error Static(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer origins,
                  ffi::AnyBuffer directions, ffi::AnyBuffer near, ffi::AnyBuffer far, ffi::AnyBuffer occupancy,
                  ffi::AnyBuffer seed, RetBuffer t_starts, RetBuffer t_ends, RetBuffer ray_indices,
                  RetBuffer ray_offsets, RetBuffer ray_counts, RetBuffer num_samples, RetBuffer num_rays,
                  StaticAttrs a) {
  ffi::Error error = RayMarchStaticShapes(origins, directions, near, far, occupancy, seed, a);
  if (error.failure()) return error;
  const int64_t rays = origins.dimensions()[0];
  const RayMarchParams p = ray_march::MakeParams(a, rays, occupancy.dimensions()[0]);
  // in.seed is unused: the kernels read the seed from device memory.
  const RayMarchInputs in = RayMarchInputsOf(origins, directions, near, far, occupancy, 0u);
  const RayMarchStaticOutputs out =
      RayMarchStaticOutputsOf(t_starts, t_ends, ray_indices, ray_offsets, ray_counts, num_samples, num_rays);
  const size_t scratch_bytes = rays > 0 ? cuda::RayMarchCountScratchBytes(p.num_rays) : 0;
  char* workspace = nullptr;
  if (scratch_bytes > 0) {
    error = ScratchOf(scratch, scratch_bytes, "RayMarchStatic", &workspace);
    if (error.failure()) return error;
  }
  return ToError(cuda::LaunchStatus(
      "RayMarchStatic", cuda::LaunchRayMarchStatic(p, in, Data<int32_t>(seed), a.sample_budget, out, workspace,
                                                   scratch_bytes, stream)));
}

MO_XLA_FFI_HANDLER("MetalOpsRayMarchStatic", "CUDA", Static, BindStreamScratchBuffers<6, 7>().Attrs<StaticAttrs>());

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
