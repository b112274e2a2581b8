// HashEncode on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsHashEncode / MetalOpsHashEncodeGrad / MetalOpsHashEncodeGradGrad (the
// kernel classes of hash_encode.h over the CUDA functor below) and XLA's CUDA
// handlers, for the calls hash_encode_xla.cc emits; both run the launchers of
// hash_encode.cu.cc on the op's stream, the gradients' workspaces from TF's
// allocator or XLA's scratch. Compiled only when the installed TensorFlow is
// a CUDA build (and into `make cuda-lib`); here `make cuda-check`
// syntax-checks it; the kernels it launches are tested through the harness
// (tests/cuda/test_hash_encode_cuda.py). MetalOpsHashGridOffsets has no GPU
// kernel: TensorFlow places it on the CPU. The table gradients (backward,
// second order) are deterministic when the backward's attribute or
// TensorFlow's op determinism asks.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <type_traits>

#define MO_TF_KERNEL  // hash_encode.h's kernel classes
#include "kernels/common/hash_grid.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before hash_encode.h: its kernel classes
#include "kernels/framework/register_kernels.h"
#include "kernels/hash_encode/hash_encode.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/util/determinism.h"

namespace mo {
namespace {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

}  // namespace

template <typename T>
struct HashEncodeFunctor<GPUDevice, T> {
  static absl::Status Forward(OpKernelContext* ctx, const hash_encode::Attrs&, const HashEncodeForwardArgs<T>& a) {
    const hash_grid::Params& params = a.params;
    return cuda::LaunchStatus("MetalOpsHashEncode",
                              cuda::LaunchHashEncodeForward(a.inputs, cuda::AsCuda(a.table), cuda::AsCuda(a.encoded),
                                                            a.dims, a.features, params, cuda::Stream(ctx)));
  }

  static absl::Status Backward(OpKernelContext* ctx, const hash_encode::GradAttrs&,
                               const HashEncodeBackwardArgs<T>& a) {
    const hash_grid::Params& params = a.params;
    cuda::HashEncodeBackwardOptions options;
    options.table_grad = a.grad_table != nullptr;
    options.input_grad = a.grad_inputs != nullptr;
    options.deterministic = a.deterministic || ::tensorflow::OpDeterminismRequired();
    const bool half = std::is_same<T, Eigen::half>::value;
    const size_t workspace_bytes =
        cuda::HashEncodeBackwardWorkspaceBytes(a.dims, a.features, a.rows, half, params, options);
    Tensor workspace;
    void* workspace_ptr = nullptr;
    TF_RETURN_IF_ERROR(AllocateWorkspace(ctx, workspace_bytes, &workspace, &workspace_ptr));
    return cuda::LaunchStatus("MetalOpsHashEncodeGrad",
                              cuda::LaunchHashEncodeBackward(cuda::AsCuda(a.grad_encoded), a.inputs,
                                                             cuda::AsCuda(a.table), cuda::AsCuda(a.grad_table),
                                                             a.grad_inputs, workspace_ptr, workspace_bytes, a.dims,
                                                             a.features, a.rows, params, options, cuda::Stream(ctx)));
  }

  static absl::Status GradGrad(OpKernelContext* ctx, const HashEncodeGradGradArgs<T>& a) {
    const bool deterministic = ::tensorflow::OpDeterminismRequired();
    const size_t workspace_bytes = cuda::HashEncodeGradGradWorkspaceBytes(
        a.dims, a.features, a.rows, std::is_same<T, Eigen::half>::value, a.params, deterministic);
    Tensor workspace;
    void* workspace_ptr = nullptr;
    TF_RETURN_IF_ERROR(AllocateWorkspace(ctx, workspace_bytes, &workspace, &workspace_ptr));
    return cuda::LaunchStatus(
        "MetalOpsHashEncodeGradGrad",
        cuda::LaunchHashEncodeGradGrad(a.grad_grad_inputs, cuda::AsCuda(a.grad_encoded), a.inputs,
                                       cuda::AsCuda(a.table), cuda::AsCuda(a.grad_table),
                                       cuda::AsCuda(a.grad_grad_encoded), workspace_ptr, workspace_bytes, a.dims,
                                       a.features, a.rows, a.params, deterministic, cuda::Stream(ctx)));
  }

 private:
  // `bytes` of device scratch in *workspace (*ptr stays null when 0).
  static absl::Status AllocateWorkspace(OpKernelContext* ctx, size_t bytes, Tensor* workspace, void** ptr) {
    if (bytes == 0) return absl::OkStatus();
    TF_RETURN_IF_ERROR(
        ctx->allocate_temp(::tensorflow::DT_UINT8, TensorShape({static_cast<int64_t>(bytes)}), workspace));
    *ptr = workspace->flat<uint8_t>().data();
    return absl::OkStatus();
  }
};

MO_HASH_ENCODE_REGISTER_KERNELS(DEVICE_GPU, GPUDevice);

}  // namespace mo

#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"

MO_XLA_FFI_ATTRS(::mo::hash_encode::Attrs);
MO_XLA_FFI_ATTRS(::mo::hash_encode::GradAttrs);

// XLA's CUDA handlers: the attributes bound whole (kernels/xla/xla_ffi_attrs.h).
namespace mo::xla_ffi {
namespace {

// launch(workspace) with `bytes` of XLA's scratch (null when 0), as an FFI
// error; an error naming `op` when the scratch is not there.
template <typename Launch>
ffi::Error LaunchWithWorkspace(ffi::ScratchAllocator& scratch, size_t bytes, const char* op, Launch&& launch) {
  unsigned char* workspace = nullptr;
  if (bytes > 0) {
    ffi::Error error = ScratchOf(scratch, bytes, op, &workspace);
    if (error.failure()) return error;
  }
  return ToError(launch(static_cast<void*>(workspace)));
}

ffi::Error XlaForward(cudaStream_t stream, ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer encoded,
                      hash_encode::Attrs a) {
  hash_encode::TableGeometry c;
  ffi::Error error = ToError(InputsAndTable(a, DimsOf(inputs), DimsOf(table), &c));
  if (error.failure() || c.params.num_points == 0) return error;
  return ForType<float, Eigen::half>(table.element_type(), "HashEncode", [&](auto type) {
    using T = decltype(type);
    return ToError(cuda::LaunchStatus(
        "MetalOpsHashEncode", cuda::LaunchHashEncodeForward(Data<float>(inputs), cuda::AsCuda(Data<T>(table)),
                                                            cuda::AsCuda(Data<T>(encoded)), c.dims, c.features,
                                                            c.params, stream)));
  });
}

ffi::Error XlaBackward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad_encoded,
                       ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer grad_table, RetBuffer grad_inputs,
                       hash_encode::GradAttrs a) {
  hash_encode::TableGeometry c;
  ffi::Error error = ToError(InputsAndTable(a, DimsOf(inputs), DimsOf(table), &c));
  if (error.failure() || (!a.compute_table_grad && !a.compute_input_grad)) return error;
  return ForType<float, Eigen::half>(table.element_type(), "HashEncodeGrad", [&](auto type) {
    using T = decltype(type);
    cuda::HashEncodeBackwardOptions options;
    options.table_grad = a.compute_table_grad;
    options.input_grad = a.compute_input_grad;
    options.deterministic = a.deterministic || ::tensorflow::OpDeterminismRequired();
    const size_t workspace_bytes = cuda::HashEncodeBackwardWorkspaceBytes(
        c.dims, c.features, c.rows, std::is_same<T, Eigen::half>::value, c.params, options);
    return LaunchWithWorkspace(scratch, workspace_bytes, "HashEncodeGrad", [&](void* workspace) {
      return cuda::LaunchStatus(
          "MetalOpsHashEncodeGrad",
          cuda::LaunchHashEncodeBackward(cuda::AsCuda(Data<T>(grad_encoded)), Data<float>(inputs),
                                         cuda::AsCuda(Data<T>(table)),
                                         options.table_grad ? cuda::AsCuda(Data<T>(grad_table)) : nullptr,
                                         options.input_grad ? Data<float>(grad_inputs) : nullptr, workspace,
                                         workspace_bytes, c.dims, c.features, c.rows, c.params, options, stream));
    });
  });
}

ffi::Error XlaGradGrad(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer grad_grad_inputs,
                       ffi::AnyBuffer grad_encoded, ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer grad_table,
                       RetBuffer grad_grad_encoded, hash_encode::Attrs a) {
  hash_encode::TableGeometry c;
  ffi::Error error = ToError(InputsAndTable(a, DimsOf(inputs), DimsOf(table), &c));
  if (error.failure()) return error;
  return ForType<float, Eigen::half>(table.element_type(), "HashEncodeGradGrad", [&](auto type) {
    using T = decltype(type);
    const bool deterministic = ::tensorflow::OpDeterminismRequired();
    const size_t workspace_bytes = cuda::HashEncodeGradGradWorkspaceBytes(
        c.dims, c.features, c.rows, std::is_same<T, Eigen::half>::value, c.params, deterministic);
    return LaunchWithWorkspace(scratch, workspace_bytes, "HashEncodeGradGrad", [&](void* workspace) {
      return cuda::LaunchStatus(
          "MetalOpsHashEncodeGradGrad",
          cuda::LaunchHashEncodeGradGrad(Data<float>(grad_grad_inputs), cuda::AsCuda(Data<T>(grad_encoded)),
                                         Data<float>(inputs), cuda::AsCuda(Data<T>(table)),
                                         cuda::AsCuda(Data<T>(grad_table)), cuda::AsCuda(Data<T>(grad_grad_encoded)),
                                         workspace, workspace_bytes, c.dims, c.features, c.rows, c.params,
                                         deterministic, stream));
    });
  });
}

MO_XLA_FFI_HANDLER("MetalOpsHashEncode", "CUDA", XlaForward, BindStreamBuffers<2, 1>().Attrs<hash_encode::Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGrad", "CUDA", XlaBackward,
                   BindStreamScratchBuffers<3, 2>().Attrs<hash_encode::GradAttrs>());
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGradGrad", "CUDA", XlaGradGrad,
                   BindStreamScratchBuffers<4, 2>().Attrs<hash_encode::Attrs>());

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
