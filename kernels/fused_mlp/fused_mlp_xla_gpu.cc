// The CUDA handlers of the XLA kernels of MetalOpsFusedMLP /
// MetalOpsFusedMLPGrad (kernels/fused_mlp/fused_mlp_xla.cc): the launchers of
// kernels/fused_mlp/fused_mlp_cuda.h on XLA's stream, TF32 as in the GPU kernel
// (kernels/fused_mlp/fused_mlp_gpu.h), the backward workspace from XLA's scratch
// allocator. Compiled in the CUDA builds (GOOGLE_CUDA); `make cuda-check`
// syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/fused_mlp/fused_mlp_cuda.h"
#include "kernels/fused_mlp/fused_mlp_gpu.h"
#include "kernels/cuda/tf_gpu.h"
#include "kernels/fused_mlp/fused_mlp_spec.h"
#include "kernels/fused_mlp/fused_mlp_xla.h"
#include "kernels/xla/xla_ffi.h"
#include "kernels/xla/xla_ffi_cuda.h"

namespace mo {
namespace xla_ffi {
namespace {

ffi::Error Forward(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets, FusedMlpCallAttrs attrs) {
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
                    ffi::RemainingRets rets, FusedMlpCallAttrs attrs) {
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

#endif  // GOOGLE_CUDA
