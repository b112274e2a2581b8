// The CUDA functor of FusedMLP (the kernel class is kernels/fused_mlp_op.h) and
// its GPU registration (C++ API). Compiled only when the
// installed TensorFlow is a CUDA build (`make` then defines GOOGLE_CUDA); no
// such build exists on the machines of this project, so this file is only
// syntax-checked by `make cuda-check`. Launchers: kernels/cuda/fused_mlp.cu.cc.
// Attributes and shapes are checked by ops/fused_mlp_checks.h, as on the CPU.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/cuda/fused_mlp.h"
#include "kernels/fused_mlp_op.h"
#include "ops/checks_tf.h"
#include "ops/fused_mlp_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

namespace mo {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace fm = fused_mlp_checks;

template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<Eigen::half> { using type = __half; };

cuda::FusedMlpShape ShapeOf(const fm::Net& net, int64_t n, const fm::Attrs& a) {
  return cuda::FusedMlpShape{n, static_cast<int>(net.in_dim), static_cast<int>(net.width), net.hidden_layers,
                             static_cast<int>(net.out_dim), a.activation, a.output_activation,
                             a.leaky_relu_alpha};
}

absl::Status LaunchStatus(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return errors::Internal(what, " CUDA launch failed: ", cudaGetErrorString(err));
}

}  // namespace

using GPUDevice = Eigen::GpuDevice;

template <typename T>
struct FusedMlpFunctor<GPUDevice, T> {
  using CT = typename CudaType<T>::type;

  static absl::Status Forward(OpKernelContext* ctx, const fm::Net& net, const fm::Attrs& a,
                              const FusedMlpForwardArgs<T>& args) {
    cuda::FusedMlpParams<CT> p{};
    for (size_t l = 0; l < args.kernels.size(); ++l) {
      p.w[l] = reinterpret_cast<const CT*>(args.kernels[l]);
      p.b[l] = reinterpret_cast<const CT*>(args.biases[l]);
    }
    return LaunchStatus("FusedMLP", cuda::LaunchFusedMlpForward<CT>(
                                        reinterpret_cast<const CT*>(args.x), p, reinterpret_cast<CT*>(args.y),
                                        reinterpret_cast<CT*>(args.hidden), ShapeOf(net, args.n, a),
                                        ctx->eigen_device<GPUDevice>().stream()));
  }

  static absl::Status Backward(OpKernelContext* ctx, const fm::Net& net, const fm::Attrs& a,
                               const FusedMlpBackwardArgs<T>& args) {
    cuda::FusedMlpParams<CT> p{};
    cuda::FusedMlpGrads<CT> g{};
    for (size_t l = 0; l < args.kernels.size(); ++l) {
      p.w[l] = reinterpret_cast<const CT*>(args.kernels[l]);
      g.dw[l] = reinterpret_cast<CT*>(args.grad_kernels[l]);
      g.db[l] = reinterpret_cast<CT*>(args.grad_biases[l]);
    }
    const cuda::FusedMlpShape s = ShapeOf(net, args.n, a);
    Tensor workspace;
    const int64_t ws_bytes = static_cast<int64_t>(cuda::FusedMlpBackwardWorkspaceBytes(s, sizeof(CT)));
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_UINT8, TensorShape({ws_bytes}), &workspace));
    return LaunchStatus("FusedMLPGrad",
                        cuda::LaunchFusedMlpBackward<CT>(
                            reinterpret_cast<const CT*>(args.grad_y), reinterpret_cast<const CT*>(args.x),
                            reinterpret_cast<const CT*>(args.y), reinterpret_cast<const CT*>(args.hidden), p,
                            reinterpret_cast<CT*>(args.grad_x), g, workspace.flat<uint8_t>().data(), s,
                            ctx->eigen_device<GPUDevice>().stream()));
  }
};

METAL_OPS_REGISTER_FUSED_MLP(DEVICE_GPU, GPUDevice, float);
METAL_OPS_REGISTER_FUSED_MLP(DEVICE_GPU, GPUDevice, Eigen::half);

}  // namespace mo

#endif  // GOOGLE_CUDA
