// GaussianTileBin on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsGaussianTileBin and MetalOpsGaussianTileBinStatic (the kernel
// classes of gaussian_tile_bin.h over the CUDA functor below), running the
// launchers of gaussian_tile_bin.cu.cc on the op's stream with scratch from
// TensorFlow's allocator. The number of intersections decides
// MetalOpsGaussianTileBin's gaussian_ids shape: the count pass's total is
// copied to the host (one stream synchronisation per call) before the kernel
// class allocates the outputs. MetalOpsGaussianTileBinStatic's outputs have a
// static size: its launcher reads nothing back, in its TF GPU kernel and in
// XLA's CUDA handler (for the calls gaussian_tile_bin_xla.cc emits) alike.
// Compiled only when the installed TensorFlow is a CUDA build (and into
// `make cuda-lib`); here `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before gaussian_tile_bin.h: its kernel class
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"
#endif
#define MO_TF_KERNEL  // gaussian_tile_bin.h's kernel class
#include "kernels/gaussian_tile_bin/gaussian_tile_bin.h"

namespace mo {

using ::tensorflow::OpKernelContext;

namespace {

// `bytes` of device scratch.
absl::Status Scratch(OpKernelContext* ctx, size_t bytes, ::tensorflow::Tensor* t) {
  return ctx->allocate_temp(::tensorflow::DT_INT8, ::tensorflow::TensorShape({static_cast<int64_t>(bytes)}), t);
}

}  // namespace

template <>
struct GaussianTileBinFunctor<GPUDevice> {
  struct State {
    ::tensorflow::Tensor offsets;  // [n] int64: the inclusive prefix sum of the tile counts
  };

  static absl::Status Count(OpKernelContext* ctx, const float* means2d, const int32_t* radii, int64_t n,
                            const gaussian_tile_bin::Attrs& a, State* state, int64_t* m) {
    const cudaStream_t stream = cuda::Stream(ctx);
    const size_t scratch_bytes = cuda::GaussianTileBinCountScratchBytes(n);
    ::tensorflow::Tensor scratch, device_total;
    TF_RETURN_IF_ERROR(Scratch(ctx, scratch_bytes, &scratch));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({n}), &state->offsets));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_INT64, ::tensorflow::TensorShape({1}), &device_total));
    auto* total = reinterpret_cast<long long*>(device_total.flat<int64_t>().data());
    TF_RETURN_IF_ERROR(cuda::LaunchStatus(
        "GaussianTileBin count",
        cuda::LaunchGaussianTileBinCount(means2d, radii, n, a, state->offsets.flat<int64_t>().data(), total,
                                         scratch.flat<int8_t>().data(), scratch_bytes, stream)));
    long long host_total = 0;
    TF_RETURN_IF_ERROR(cuda::CudaStatus("GaussianTileBin total copy",
                                        cuda::CopyToHost(&host_total, total, sizeof(host_total), stream)));
    *m = host_total;
    return absl::OkStatus();
  }

  static absl::Status Bin(OpKernelContext* ctx, const float* means2d, const int32_t* radii, const float* depths,
                          int64_t n, const gaussian_tile_bin::Attrs& a, State* state, int64_t m,
                          int32_t* gaussian_ids, int32_t* tile_ranges) {
    const size_t scratch_bytes = m > 0 ? cuda::GaussianTileBinSortScratchBytes(m, a) : 0;
    ::tensorflow::Tensor scratch;
    if (scratch_bytes > 0) TF_RETURN_IF_ERROR(Scratch(ctx, scratch_bytes, &scratch));
    const int64_t* offsets = n > 0 ? state->offsets.flat<int64_t>().data() : nullptr;
    return cuda::LaunchStatus(
        "GaussianTileBin", cuda::LaunchGaussianTileBinSort(
                               means2d, radii, depths, n, a, offsets, m, gaussian_ids, tile_ranges,
                               scratch_bytes > 0 ? scratch.flat<int8_t>().data() : nullptr, scratch_bytes,
                               cuda::Stream(ctx)));
  }

  static absl::Status Static(OpKernelContext* ctx, const float* means2d, const int32_t* radii, const float* depths,
                             int64_t n, const gaussian_tile_bin::StaticAttrs& a,
                             const GaussianTileBinStaticOutputs& out) {
    const size_t scratch_bytes = cuda::GaussianTileBinStaticScratchBytes(n, a);
    ::tensorflow::Tensor scratch;
    TF_RETURN_IF_ERROR(Scratch(ctx, scratch_bytes, &scratch));
    return cuda::LaunchStatus("GaussianTileBinStatic",
                              cuda::LaunchGaussianTileBinStatic(means2d, radii, depths, n, a, out,
                                                                scratch.flat<int8_t>().data(), scratch_bytes,
                                                                cuda::Stream(ctx)));
  }
};

}  // namespace mo

REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianTileBin").Device(::tensorflow::DEVICE_GPU),
                        ::mo::GaussianTileBinKernel<::mo::GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianTileBinStatic").Device(::tensorflow::DEVICE_GPU),
                        ::mo::GaussianTileBinStaticKernel<::mo::GPUDevice>);

#if MO_XLA
// XLA's CUDA handler of MetalOpsGaussianTileBinStatic: the attributes bound
// whole (kernels/xla/xla_ffi.h), the buffers' shapes checked, the workspace
// from XLA's scratch allocator; nothing read back.
namespace mo::xla_ffi {
namespace {

ffi::Error GaussianTileBinStaticCuda(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args,
                                     ffi::RemainingRets rets, gaussian_tile_bin::StaticAttrs a) {
  return GaussianTileBinStaticXla(args, rets, [&](const float* means2d, const int32_t* radii, const float* depths,
                                                  int64_t n, const GaussianTileBinStaticOutputs& out) {
    const size_t bytes = cuda::GaussianTileBinStaticScratchBytes(n, a);
    char* workspace = nullptr;
    ffi::Error error = ScratchOf(scratch, bytes, "GaussianTileBinStatic", &workspace);
    if (error.failure()) return error;
    return ToError(cuda::LaunchStatus("GaussianTileBinStatic",
                                      cuda::LaunchGaussianTileBinStatic(means2d, radii, depths, n, a, out,
                                                                        workspace, bytes, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianTileBinStatic", "CUDA", GaussianTileBinStaticCuda,
                   BindCallBuffers<gaussian_tile_bin::StaticAttrs>(BindStreamScratch()));

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
