// FusedMLP on CUDA in TensorFlow: the GPU functor of fused_mlp.h's kernel
// classes and their registrations (C++ API), and XLA's CUDA handlers of the
// calls fused_mlp_xla.cc emits, both on the launchers of fused_mlp.cu.cc
// (TensorFlow's stream, or XLA's with the backward workspace from XLA's
// scratch allocator), with one launch shape and one TF32 choice. Compiled only
// when the installed TensorFlow is a CUDA build (`make` then defines
// GOOGLE_CUDA); `make cuda-check` syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tsl/platform/tensor_float_32_utils.h"
#if MO_XLA
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"
#endif

#define MO_TF_KERNEL  // fused_mlp.h's kernel classes (their headers are above)
#include "kernels/fused_mlp/fused_mlp.h"

namespace mo {
namespace cuda {

inline FusedMlpShape ShapeOf(const fused_mlp::Net& net, int64_t n, const fused_mlp::Attrs& a) {
  return FusedMlpShape{n, static_cast<int>(net.in_dim), static_cast<int>(net.width), net.hidden_layers,
                       static_cast<int>(net.out_dim), a.activation, a.output_activation, a.leaky_relu_alpha};
}

// float32 on TF32 tensor cores when TensorFlow allows TF32 for its own
// float32 products (tf.config.experimental.enable_tensor_float_32_execution,
// on by default) and NVIDIA's process-wide override does not forbid it
// (NVIDIA_TF32_OVERRIDE=0 turns TF32 off in cuBLAS and cuDNN; the tests set it
// to compare with TensorFlow's float32). Read at every launch: both can change
// while the process runs.
template <typename T>
bool UseTf32() {
  if (!std::is_same<T, float>::value || !tsl::tensor_float_32_execution_enabled()) return false;
  const char* env = std::getenv("NVIDIA_TF32_OVERRIDE");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

}  // namespace cuda

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

#if MO_XLA
MO_XLA_FFI_ATTRS(::mo::fused_mlp::Attrs);

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, fused_mlp::Attrs attrs) {
  FusedMlpCall c;
  ffi::Error error = FusedMlpForwardOf(args, rets, attrs, &c);
  if (error.failure()) return error;
  const std::vector<ffi::AnyBuffer>& in = c.in;
  return ForType<float, Eigen::half>(in[0].element_type(), "FusedMLP", [&](auto type) {
    using T = decltype(type);
    using CT = typename cuda::CudaType<T>::type;
    cuda::FusedMlpParams<CT> p{};
    for (int l = 0; l < c.num; ++l) {
      p.w[l] = cuda::AsCuda(Data<T>(in[1 + l]));
      p.b[l] = cuda::AsCuda(Data<T>(in[1 + c.num + l]));
    }
    cuda::FusedMlpShape s = cuda::ShapeOf(c.net, in[0].dimensions()[0], c.attrs);
    s.tf32 = cuda::UseTf32<T>();
    return ToError(cuda::GpuStatusOf(
        "FusedMLP", cuda::LaunchFusedMlpForward<CT>(cuda::AsCuda(Data<T>(in[0])), p, cuda::AsCuda(Data<T>(c.out[0])),
                                                    cuda::AsCuda(Data<T>(c.out[1])), s, stream)));
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args,
                    ffi::RemainingRets rets, fused_mlp::Attrs attrs) {
  FusedMlpCall c;
  ffi::Error error = FusedMlpBackwardOf(args, rets, attrs, &c);
  if (error.failure()) return error;
  const std::vector<ffi::AnyBuffer>& in = c.in;
  const int num = c.num;
  return ForType<float, Eigen::half>(in[1].element_type(), "FusedMLPGrad", [&](auto type) {
    using T = decltype(type);
    using CT = typename cuda::CudaType<T>::type;
    cuda::FusedMlpParams<CT> p{};
    cuda::FusedMlpGrads<CT> g{};
    for (int l = 0; l < num; ++l) {
      p.w[l] = cuda::AsCuda(Data<T>(in[2 + l]));
      g.dw[l] = cuda::AsCuda(Data<T>(c.out[1 + l]));
      g.db[l] = cuda::AsCuda(Data<T>(c.out[1 + num + l]));
    }
    cuda::FusedMlpShape s = cuda::ShapeOf(c.net, in[1].dimensions()[0], c.attrs);
    s.tf32 = cuda::UseTf32<T>();
    const size_t ws_bytes = cuda::FusedMlpBackwardWorkspaceBytes(s, sizeof(CT));
    std::optional<void*> workspace = AllocateScratch(scratch, ws_bytes);
    if (!workspace.has_value()) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted, "FusedMLPGrad: could not allocate its GPU workspace");
    }
    return ToError(cuda::GpuStatusOf(
        "FusedMLPGrad",
        cuda::LaunchFusedMlpBackward<CT>(cuda::AsCuda(Data<T>(in[0])), cuda::AsCuda(Data<T>(in[1])),
                                         cuda::AsCuda(Data<T>(in[2 + num])), cuda::AsCuda(Data<T>(in[3 + num])), p,
                                         cuda::AsCuda(Data<T>(c.out[0])), g, static_cast<uint8_t*>(*workspace),
                                         ws_bytes, s, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsFusedMLP", "CUDA", Forward, BindFusedMlp(BindStream()));
MO_XLA_FFI_HANDLER("MetalOpsFusedMLPGrad", "CUDA", Backward, BindFusedMlp(BindStreamScratch()));

}  // namespace
}  // namespace xla_ffi
}  // namespace mo
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
