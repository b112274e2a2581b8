// MetalOpsHashEncode / MetalOpsHashEncodeGrad as TensorFlow GPU kernels (C++
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
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
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

using ::mo::hash_encode_tf::CheckInputsAndTable;
using ::mo::hash_encode_tf::CheckMatrix;
using ::mo::hash_encode_tf::GridAttrs;
using ::mo::hash_encode_tf::ReadGridAttrs;

// Checks inputs and table (shared with the CPU kernels), then the launch
// parameters of the grid.
absl::Status ValidateAndMakeParams(const GridAttrs& a, const Tensor& inputs, const Tensor& table, int* dims,
                                   int* features, hg::Params* params, int64_t* rows) {
  TF_RETURN_IF_ERROR(CheckInputsAndTable(a, inputs, table, dims, features, rows));
  *params = ::mo::hash_encode_checks::MakeParams(a, *dims, inputs.dim_size(0));
  return absl::OkStatus();
}

absl::Status LaunchStatus(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return ::tensorflow::errors::Internal(what, " CUDA launch failed: ", cudaGetErrorString(err));
}

template <typename T>
class HashEncodeGpuOp : public OpKernel {
 public:
  explicit HashEncodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadGridAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    typedef typename DeviceType<T>::type DT;
    const Tensor& inputs = ctx->input(0);
    const Tensor& table = ctx->input(1);
    int dims = 0, features = 0;
    int64_t rows = 0;
    hg::Params params;
    OP_REQUIRES_OK(ctx, ValidateAndMakeParams(attrs_, inputs, table, &dims, &features, &params, &rows));
    const int64_t n = inputs.dim_size(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, int64_t(attrs_.num_levels) * features}), &out));
    if (n == 0) return;
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    OP_REQUIRES_OK(ctx, LaunchStatus("MetalOpsHashEncode",
                                     ::mo::cuda::LaunchHashEncodeForward(
                                         inputs.flat<float>().data(),
                                         reinterpret_cast<const DT*>(table.flat<T>().data()),
                                         reinterpret_cast<DT*>(out->flat<T>().data()), dims, features, params,
                                         stream)));
  }

 private:
  GridAttrs attrs_;
};

template <typename T>
class HashEncodeGradGpuOp : public OpKernel {
 public:
  explicit HashEncodeGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadGridAttrs(ctx, &attrs_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("compute_table_grad", &table_grad_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("compute_input_grad", &input_grad_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("deterministic", &deterministic_));
  }

  void Compute(OpKernelContext* ctx) override {
    typedef typename DeviceType<T>::type DT;
    const Tensor& dy = ctx->input(0);
    const Tensor& inputs = ctx->input(1);
    const Tensor& table = ctx->input(2);
    int dims = 0, features = 0;
    int64_t rows = 0;
    hg::Params params;
    OP_REQUIRES_OK(ctx, ValidateAndMakeParams(attrs_, inputs, table, &dims, &features, &params, &rows));
    const int64_t n = inputs.dim_size(0);
    const int64_t width = int64_t(attrs_.num_levels) * features;
    OP_REQUIRES_OK(ctx, CheckMatrix("grad_encoded", dy, n, width));
    Tensor* grad_table = nullptr;
    Tensor* grad_inputs = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({table_grad_ ? rows : 0, features}), &grad_table));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({input_grad_ ? n : 0, dims}), &grad_inputs));
    if (!table_grad_ && !input_grad_) return;

    ::mo::cuda::HashEncodeBackwardOptions options;
    options.table_grad = table_grad_;
    options.input_grad = input_grad_;
    options.deterministic = deterministic_ || ::tensorflow::OpDeterminismRequired();
    const bool half = std::is_same<T, Eigen::half>::value;
    const size_t workspace_bytes =
        ::mo::cuda::HashEncodeBackwardWorkspaceBytes(dims, features, rows, half, params, options);
    Tensor workspace;
    void* workspace_ptr = nullptr;
    if (workspace_bytes > 0) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_UINT8,
                                             TensorShape({static_cast<int64_t>(workspace_bytes)}), &workspace));
      workspace_ptr = workspace.flat<uint8_t>().data();
    }
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    OP_REQUIRES_OK(ctx, LaunchStatus("MetalOpsHashEncodeGrad",
                                     ::mo::cuda::LaunchHashEncodeBackward(
                                         reinterpret_cast<const DT*>(dy.flat<T>().data()),
                                         inputs.flat<float>().data(),
                                         reinterpret_cast<const DT*>(table.flat<T>().data()),
                                         table_grad_ ? reinterpret_cast<DT*>(grad_table->flat<T>().data()) : nullptr,
                                         input_grad_ ? grad_inputs->flat<float>().data() : nullptr, workspace_ptr,
                                         workspace_bytes, dims, features, rows, params, options, stream)));
  }

 private:
  GridAttrs attrs_;
  bool table_grad_ = true;
  bool input_grad_ = true;
  bool deterministic_ = false;
};

#define METAL_OPS_REGISTER_HASH_ENCODE_GPU(T)                                                             \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsHashEncode").Device(DEVICE_GPU).TypeConstraint<T>("T"),           \
                          HashEncodeGpuOp<T>);                                                            \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsHashEncodeGrad").Device(DEVICE_GPU).TypeConstraint<T>("T"),       \
                          HashEncodeGradGpuOp<T>);
METAL_OPS_REGISTER_HASH_ENCODE_GPU(float);
METAL_OPS_REGISTER_HASH_ENCODE_GPU(Eigen::half);
#undef METAL_OPS_REGISTER_HASH_ENCODE_GPU

}  // namespace
}  // namespace mo

#endif  // GOOGLE_CUDA
