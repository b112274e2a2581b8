// The CUDA functor of MetalOpsHashEncode / MetalOpsHashEncodeGrad (the kernel
// class is kernels/hash_encode_op.h) and its GPU registration (C++
// API). Compiled only when the installed TensorFlow is a CUDA build (`make`
// then defines GOOGLE_CUDA and links kernels/cuda/hash_encode.cu.cc); `make
// cuda-check` syntax-checks it against the pip headers. Not run here: the
// kernels it launches are tested through the harness on an H100
// (tests/cuda/test_hash_encode_cuda.py).
// Attributes and input checks: ops/hash_encode_checks.h, shared with the
// CPU kernels.
// MetalOpsHashEncodeGradGrad and MetalOpsHashGridOffsets have no GPU kernel:
// TensorFlow places them on the CPU.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/cuda/hash_encode.h"
#include "kernels/hash_encode_op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/util/determinism.h"

namespace mo {
namespace {

namespace hg = ::mo::hash_grid;
using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Eigen::half and __half are both one IEEE binary16 in 2 bytes.
template <typename T>
struct DeviceType {
  typedef T type;
};
template <>
struct DeviceType<Eigen::half> {
  typedef __half type;
};
static_assert(sizeof(Eigen::half) == sizeof(__half), "half layouts differ");

using ::mo::hash_encode_tf::GridAttrs;

absl::Status LaunchStatus(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return ::tensorflow::errors::Internal(what, " CUDA launch failed: ", cudaGetErrorString(err));
}

}  // namespace

using GPUDevice = Eigen::GpuDevice;

template <typename T>
struct HashEncodeFunctor<GPUDevice, T> {
  using DT = typename DeviceType<T>::type;

  static absl::Status Forward(OpKernelContext* ctx, const GridAttrs& grid, const HashEncodeForwardArgs<T>& a) {
    const hg::Params params = hash_encode_checks::MakeParams(grid, a.dims, a.num_points);
    return LaunchStatus("MetalOpsHashEncode",
                        cuda::LaunchHashEncodeForward(a.inputs, reinterpret_cast<const DT*>(a.table),
                                                      reinterpret_cast<DT*>(a.encoded), a.dims, a.features, params,
                                                      ctx->eigen_device<GPUDevice>().stream()));
  }

  static absl::Status Backward(OpKernelContext* ctx, const GridAttrs& grid, const HashEncodeBackwardArgs<T>& a) {
    const hg::Params params = hash_encode_checks::MakeParams(grid, a.dims, a.num_points);
    cuda::HashEncodeBackwardOptions options;
    options.table_grad = a.grad_table != nullptr;
    options.input_grad = a.grad_inputs != nullptr;
    options.deterministic = a.deterministic || ::tensorflow::OpDeterminismRequired();
    const bool half = std::is_same<T, Eigen::half>::value;
    const size_t workspace_bytes =
        cuda::HashEncodeBackwardWorkspaceBytes(a.dims, a.features, a.rows, half, params, options);
    Tensor workspace;
    void* workspace_ptr = nullptr;
    if (workspace_bytes > 0) {
      TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_UINT8,
                                            TensorShape({static_cast<int64_t>(workspace_bytes)}), &workspace));
      workspace_ptr = workspace.flat<uint8_t>().data();
    }
    return LaunchStatus("MetalOpsHashEncodeGrad",
                        cuda::LaunchHashEncodeBackward(
                            reinterpret_cast<const DT*>(a.grad_encoded), a.inputs,
                            reinterpret_cast<const DT*>(a.table), reinterpret_cast<DT*>(a.grad_table),
                            a.grad_inputs, workspace_ptr, workspace_bytes, a.dims, a.features, a.rows, params,
                            options, ctx->eigen_device<GPUDevice>().stream()));
  }
};

#define METAL_OPS_REGISTER_HASH_ENCODE_GPU(T)                                                             \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsHashEncode").Device(DEVICE_GPU).TypeConstraint<T>("T"),           \
                          HashEncodeOp<GPUDevice, T>);                                                    \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsHashEncodeGrad").Device(DEVICE_GPU).TypeConstraint<T>("T"),       \
                          HashEncodeGradOp<GPUDevice, T>);
METAL_OPS_REGISTER_HASH_ENCODE_GPU(float);
METAL_OPS_REGISTER_HASH_ENCODE_GPU(Eigen::half);
#undef METAL_OPS_REGISTER_HASH_ENCODE_GPU

}  // namespace mo

#endif  // GOOGLE_CUDA
