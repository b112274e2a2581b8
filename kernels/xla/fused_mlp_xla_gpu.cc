// The CUDA handlers of the XLA kernels of MetalOpsFusedMLP /
// MetalOpsFusedMLPGrad (kernels/xla/fused_mlp_xla.cc): the launchers of
// kernels/cuda/fused_mlp.h on XLA's stream, TF32 as in the GPU kernel
// (kernels/cuda/fused_mlp_gpu.h), the backward workspace from XLA's scratch
// allocator. Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check`
// syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/cuda/fused_mlp.h"
#include "kernels/cuda/fused_mlp_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/spec/fused_mlp_spec.h"
#include "kernels/xla/xla_ffi.h"

namespace mo {
namespace xla_ffi {
namespace {

fused_mlp::Attrs AttrsOf(int64_t activation, int64_t output_activation, float leaky_relu_alpha) {
  fused_mlp::Attrs a;
  a.activation = static_cast<int>(activation);
  a.output_activation = static_cast<int>(output_activation);
  a.leaky_relu_alpha = leaky_relu_alpha;
  return a;
}

// in: x, N kernels, N biases; out: y, hidden.
ffi::Error Forward(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t activation,
                   int64_t output_activation, float leaky_relu_alpha) {
  std::vector<ffi::AnyBuffer> in;
  std::vector<ffi::Result<ffi::AnyBuffer>> out;
  ffi::Error error = BuffersOf(args, &in);
  if (error.success()) error = BuffersOf(rets, &out);
  if (error.failure()) return error;
  if (in.size() < 3 || in.size() % 2 != 1 || out.size() != 2) {
    return ffi::Error::Internal("FusedMLP: the XLA call has the wrong number of operands or results");
  }
  const int num = static_cast<int>(in.size() / 2);
  std::vector<checks::Dims> kernel_dims, bias_dims;
  for (int l = 0; l < num; ++l) {
    kernel_dims.push_back(DimsOf(in[1 + l]));
    bias_dims.push_back(DimsOf(in[1 + num + l]));
  }
  fused_mlp::Net net;
  error = ToError(fused_mlp::Shapes(DimsOf(in[0]), kernel_dims, bias_dims, &net));
  if (error.failure()) return error;
  return ForType<float, Eigen::half>(in[0].element_type(), "FusedMLP", [&](auto type) {
    using T = decltype(type);
    using CT = typename cuda::CudaType<T>::type;
    cuda::FusedMlpParams<CT> p{};
    for (int l = 0; l < num; ++l) {
      p.w[l] = cuda::AsCuda(Data<T>(in[1 + l]));
      p.b[l] = cuda::AsCuda(Data<T>(in[1 + num + l]));
    }
    cuda::FusedMlpShape s =
        cuda::ShapeOf(net, in[0].dimensions()[0], AttrsOf(activation, output_activation, leaky_relu_alpha));
    s.tf32 = cuda::UseTf32<T>();
    return ToError(cuda::GpuStatusOf(
        "FusedMLP", cuda::LaunchFusedMlpForward<CT>(cuda::AsCuda(Data<T>(in[0])), p, cuda::AsCuda(Data<T>(out[0])),
                                                    cuda::AsCuda(Data<T>(out[1])), s, stream)));
  });
}

// in: grad_y, x, N kernels, y, hidden; out: grad_x, N grad_kernels, N grad_biases.
ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args,
                    ffi::RemainingRets rets, int64_t activation, int64_t output_activation, float leaky_relu_alpha) {
  std::vector<ffi::AnyBuffer> in;
  std::vector<ffi::Result<ffi::AnyBuffer>> out;
  ffi::Error error = BuffersOf(args, &in);
  if (error.success()) error = BuffersOf(rets, &out);
  if (error.failure()) return error;
  const int num = static_cast<int>(in.size()) - 4;
  if (num < 1 || out.size() != static_cast<size_t>(1 + 2 * num)) {
    return ffi::Error::Internal("FusedMLPGrad: the XLA call has the wrong number of operands or results");
  }
  std::vector<checks::Dims> kernel_dims, bias_dims;
  for (int l = 0; l < num; ++l) {
    kernel_dims.push_back(DimsOf(in[2 + l]));
    bias_dims.push_back({kernel_dims.back().size() == 2 ? kernel_dims.back()[1] : 0});
  }
  fused_mlp::Net net;
  error = ToError(fused_mlp::Shapes(DimsOf(in[1]), kernel_dims, bias_dims, &net));
  if (error.failure()) return error;
  return ForType<float, Eigen::half>(in[1].element_type(), "FusedMLPGrad", [&](auto type) {
    using T = decltype(type);
    using CT = typename cuda::CudaType<T>::type;
    cuda::FusedMlpParams<CT> p{};
    cuda::FusedMlpGrads<CT> g{};
    for (int l = 0; l < num; ++l) {
      p.w[l] = cuda::AsCuda(Data<T>(in[2 + l]));
      g.dw[l] = cuda::AsCuda(Data<T>(out[1 + l]));
      g.db[l] = cuda::AsCuda(Data<T>(out[1 + num + l]));
    }
    cuda::FusedMlpShape s =
        cuda::ShapeOf(net, in[1].dimensions()[0], AttrsOf(activation, output_activation, leaky_relu_alpha));
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
                                         cuda::AsCuda(Data<T>(out[0])), g, static_cast<uint8_t*>(*workspace),
                                         ws_bytes, s, stream)));
  });
}

XLA_FFI_DEFINE_HANDLER(kForward, Forward,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<cudaStream_t>>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<int64_t>("activation")
                           .Attr<int64_t>("output_activation")
                           .Attr<float>("leaky_relu_alpha"));
XLA_FFI_DEFINE_HANDLER(kBackward, Backward,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<cudaStream_t>>()
                           .Ctx<ffi::ScratchAllocator>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<int64_t>("activation")
                           .Attr<int64_t>("output_activation")
                           .Attr<float>("leaky_relu_alpha"));
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsFusedMLP", "CUDA", kForward);
MO_REGISTER_XLA_FFI_HANDLER("MetalOpsFusedMLPGrad", "CUDA", kBackward);

}  // namespace
}  // namespace xla_ffi
}  // namespace mo

#endif  // GOOGLE_CUDA
