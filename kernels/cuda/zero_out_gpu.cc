// ZeroOut as a TensorFlow GPU kernel (C++ API). Compiled only when the
// installed TensorFlow is a CUDA build: `make` then defines GOOGLE_CUDA and
// links the nvcc objects from kernels/cuda/*.cu.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/cuda/zero_out.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

template <typename T>
class ZeroOutGpuOp : public OpKernel {
 public:
  explicit ZeroOutGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("preserve_index", &preserve_index_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    const int64_t n = input.NumElements();
    OP_REQUIRES(ctx, n == 0 || preserve_index_ < n,
                ::tensorflow::errors::InvalidArgument(
                    "ZeroOut: preserve_index ", preserve_index_,
                    " is out of range for input 'to_zero' with ", n, " elements"));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, input.shape(), &output));
    const cudaStream_t stream = ctx->eigen_device<Eigen::GpuDevice>().stream();
    const cudaError_t err = mo::cuda::LaunchZeroOut(
        input.flat<T>().data(), output->flat<T>().data(), n, preserve_index_, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                ::tensorflow::errors::Internal("ZeroOut CUDA launch failed: ",
                                               cudaGetErrorString(err)));
  }

 private:
  int64_t preserve_index_ = 0;
};

// int32 stays on the host by TensorFlow's convention for GPU devices.
#define METAL_OPS_REGISTER_ZERO_OUT_GPU(T)                             \
  REGISTER_KERNEL_BUILDER(                                             \
      Name("ZeroOut").Device(::tensorflow::DEVICE_GPU).TypeConstraint<T>("T"), \
      ZeroOutGpuOp<T>)
METAL_OPS_REGISTER_ZERO_OUT_GPU(int64_t);
METAL_OPS_REGISTER_ZERO_OUT_GPU(float);
METAL_OPS_REGISTER_ZERO_OUT_GPU(double);
#undef METAL_OPS_REGISTER_ZERO_OUT_GPU

}  // namespace mo

#endif  // GOOGLE_CUDA
