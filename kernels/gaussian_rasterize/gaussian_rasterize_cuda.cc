// GaussianRasterize on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsGaussianRasterize / MetalOpsGaussianRasterizeGrad (the kernel classes of
// gaussian_rasterize.h over the CUDA functor below), which run the launchers of
// gaussian_rasterize.cu.cc on the op's stream. The shapes are checked as on the
// CPU; the index values are not read back to the host: the kernels skip ids
// and clamp ranges outside their bounds. Compiled only when the installed
// TensorFlow is a CUDA build (and into `make cuda-lib`); here `make cuda-check`
// syntax-checks it. XLA's CUDA handlers (for the calls gaussian_rasterize_xla.cc
// emits) run the same launchers on XLA's stream.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
#if MO_XLA
#include "kernels/xla/xla_ffi.h"  // before gaussian_rasterize.h: its XLA handlers' helpers
#include "kernels/xla/xla_ffi_attrs.h"
#include "kernels/xla/xla_ffi_cuda.h"
#endif
#define MO_TF_KERNEL  // gaussian_rasterize.h's kernel classes
#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

namespace mo {

template <>
struct GaussianRasterizeFunctor<GPUDevice> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const gaussian_rasterize::Sizes& s,
                              const gaussian_rasterize::Attrs& a, const gaussian_rasterize::ForwardArgs& t) {
    return cuda::LaunchStatus("GaussianRasterize", cuda::LaunchGaussianRasterizeForward(t, s, a, cuda::Stream(ctx)));
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const gaussian_rasterize::Sizes& s,
                               const gaussian_rasterize::Attrs& a, const gaussian_rasterize::BackwardArgs& t) {
    return cuda::LaunchStatus("GaussianRasterizeGrad",
                              cuda::LaunchGaussianRasterizeBackward(t, s, a, cuda::Stream(ctx)));
  }
};

}  // namespace mo

REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianRasterize").Device(::tensorflow::DEVICE_GPU),
                        ::mo::GaussianRasterizeKernel<::mo::GPUDevice, false>);
REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianRasterizeGrad").Device(::tensorflow::DEVICE_GPU),
                        ::mo::GaussianRasterizeKernel<::mo::GPUDevice, true>);

#if MO_XLA
MO_XLA_FFI_ATTRS(::mo::gaussian_rasterize::Attrs);

// XLA's CUDA handlers (kGrad: the gradient op's), for the calls
// gaussian_rasterize_xla.cc emits: the attributes bound whole
// (kernels/xla/xla_ffi.h), the shapes checked, the same launchers on XLA's stream.
namespace mo::xla_ffi {
namespace {

template <bool kGrad>
ffi::Error GaussianRasterizeCuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                                 gaussian_rasterize::Attrs a) {
  return GaussianRasterizeXla(args, rets, a, kGrad, [&](const GaussianRasterizeXlaCall& c) {
    return ToError(cuda::LaunchStatus(kGrad ? "GaussianRasterizeGrad" : "GaussianRasterize",
                                      kGrad ? cuda::LaunchGaussianRasterizeBackward(c.backward, c.sizes, a, stream)
                                            : cuda::LaunchGaussianRasterizeForward(c.forward, c.sizes, a, stream)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianRasterize", "CUDA", GaussianRasterizeCuda<false>,
                   BindCallBuffers<gaussian_rasterize::Attrs>(BindStream()));
MO_XLA_FFI_HANDLER("MetalOpsGaussianRasterizeGrad", "CUDA", GaussianRasterizeCuda<true>,
                   BindCallBuffers<gaussian_rasterize::Attrs>(BindStream()));

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
