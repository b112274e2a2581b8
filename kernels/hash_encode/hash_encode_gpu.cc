// The CUDA functor of MetalOpsHashEncode / MetalOpsHashEncodeGrad /
// MetalOpsHashEncodeGradGrad (the kernel classes are
// kernels/hash_encode/hash_encode_kernel.h) and their GPU registration (C++ API).
// Compiled only when the installed TensorFlow is a CUDA build (`make`
// then defines GOOGLE_CUDA and links kernels/hash_encode/hash_encode.cu.cc); `make
// cuda-check` syntax-checks it against the pip headers; the kernels it
// launches are tested through the harness (tests/cuda/test_hash_encode_cuda.py).
// Attributes and input checks: kernels/hash_encode/hash_encode_spec.h, shared with the
// CPU kernels.
// MetalOpsHashGridOffsets has no GPU kernel: TensorFlow places it on the CPU.
// The table gradients (backward, second order) are deterministic when the
// backward's attribute or TensorFlow's op determinism asks.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/hash_encode/hash_encode_cuda.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/hash_encode/hash_encode_kernel.h"
#include "kernels/framework/register_kernels.h"
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

using ::mo::hash_encode::GridAttrs;

}  // namespace

template <typename T>
struct HashEncodeFunctor<GPUDevice, T> {
  static absl::Status Forward(OpKernelContext* ctx, const GridAttrs&, const HashEncodeForwardArgs<T>& a) {
    const hash_grid::Params& params = a.params;
    return cuda::LaunchStatus("MetalOpsHashEncode",
                              cuda::LaunchHashEncodeForward(a.inputs, cuda::AsCuda(a.table), cuda::AsCuda(a.encoded),
                                                            a.dims, a.features, params, cuda::Stream(ctx)));
  }

  static absl::Status Backward(OpKernelContext* ctx, const GridAttrs&, const HashEncodeBackwardArgs<T>& a) {
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

MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE_GPU, GPUDevice, Eigen::half);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_GPU, float, HashEncodeGradGradOp<GPUDevice, float>);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_GPU, Eigen::half, HashEncodeGradGradOp<GPUDevice, Eigen::half>);

}  // namespace mo

#endif  // GOOGLE_CUDA
