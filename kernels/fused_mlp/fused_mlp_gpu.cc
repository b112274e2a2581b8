// The CUDA functor of FusedMLP (the kernel class is kernels/fused_mlp/fused_mlp_kernel.h) and
// its GPU registration (C++ API). Compiled only when the installed
// TensorFlow is a CUDA build (`make` then defines GOOGLE_CUDA); `make
// cuda-check` syntax-checks it. Launchers: kernels/fused_mlp/fused_mlp.cu.cc.
// Attributes and shapes are checked by kernels/fused_mlp/fused_mlp_spec.h, as on the CPU.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/fused_mlp/fused_mlp_cuda.h"
#include "kernels/fused_mlp/fused_mlp_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/fused_mlp/fused_mlp_kernel.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/fused_mlp/fused_mlp_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using ::tensorflow::OpKernelContext;

template <typename T>
struct FusedMlpFunctor<GPUDevice, T> {
  using CT = typename cuda::CudaType<T>::type;

  static absl::Status Forward(OpKernelContext* ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                              const FusedMlpForwardArgs<T>& args) {
    cuda::FusedMlpParams<CT> p{};
    for (size_t l = 0; l < args.kernels.size(); ++l) {
      p.w[l] = cuda::AsCuda(args.kernels[l]);
      p.b[l] = cuda::AsCuda(args.biases[l]);
    }
    cuda::FusedMlpShape s = cuda::ShapeOf(net, args.n, a);
    s.tf32 = cuda::UseTf32<T>();
    return cuda::GpuStatusOf("FusedMLP",
                             cuda::LaunchFusedMlpForward<CT>(cuda::AsCuda(args.x), p, cuda::AsCuda(args.y),
                                                             cuda::AsCuda(args.hidden), s, cuda::Stream(ctx)));
  }

  static absl::Status Backward(OpKernelContext* ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                               const FusedMlpBackwardArgs<T>& args) {
    cuda::FusedMlpParams<CT> p{};
    cuda::FusedMlpGrads<CT> g{};
    for (size_t l = 0; l < args.kernels.size(); ++l) {
      p.w[l] = cuda::AsCuda(args.kernels[l]);
      g.dw[l] = cuda::AsCuda(args.grad_kernels[l]);
      g.db[l] = cuda::AsCuda(args.grad_biases[l]);
    }
    cuda::FusedMlpShape s = cuda::ShapeOf(net, args.n, a);
    // Read again, not carried from the forward: either path takes any float32
    // saved activations.
    s.tf32 = cuda::UseTf32<T>();
    ::tensorflow::Tensor workspace;
    const int64_t ws_bytes = static_cast<int64_t>(cuda::FusedMlpBackwardWorkspaceBytes(s, sizeof(CT)));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_UINT8, ::tensorflow::TensorShape({ws_bytes}), &workspace));
    return cuda::GpuStatusOf("FusedMLPGrad",
                             cuda::LaunchFusedMlpBackward<CT>(cuda::AsCuda(args.grad_y), cuda::AsCuda(args.x),
                                                              cuda::AsCuda(args.y), cuda::AsCuda(args.hidden), p,
                                                              cuda::AsCuda(args.grad_x), g,
                                                              workspace.flat<uint8_t>().data(),
                                                              static_cast<size_t>(ws_bytes), s, cuda::Stream(ctx)));
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, DEVICE_GPU, GPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, DEVICE_GPU, GPUDevice, Eigen::half);

}  // namespace mo

#endif  // GOOGLE_CUDA
