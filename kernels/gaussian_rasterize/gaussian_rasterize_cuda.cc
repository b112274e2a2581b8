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

// XLA's CUDA handlers, for the calls gaussian_rasterize_xla.cc emits: the
// attributes bound whole (kernels/xla/xla_ffi.h), the shapes checked, the
// same launchers on XLA's stream.
namespace mo::xla_ffi {
namespace {

using gaussian_rasterize::Attrs;

ffi::Error GaussianRasterizeXlaForward(cudaStream_t stream, ffi::AnyBuffer means2d, ffi::AnyBuffer conics,
                                       ffi::AnyBuffer colors, ffi::AnyBuffer opacities, ffi::AnyBuffer background,
                                       ffi::AnyBuffer ids, ffi::AnyBuffer ranges, RetBuffer image, RetBuffer alpha,
                                       RetBuffer last_ids, Attrs a) {
  gaussian_rasterize::Sizes s;
  ffi::Error error = GaussianRasterizeXlaSizes(a, means2d, conics, colors, opacities, background, ids, ranges, &s);
  if (error.failure()) return error;
  const gaussian_rasterize::ForwardArgs t{
      Data<float>(means2d),  Data<float>(conics), Data<float>(colors), Data<float>(opacities),
      Data<float>(background), Data<int32_t>(ids), Data<int32_t>(ranges), Data<float>(image),
      Data<float>(alpha),    Data<int32_t>(last_ids)};
  return ToError(cuda::LaunchStatus("GaussianRasterize", cuda::LaunchGaussianRasterizeForward(t, s, a, stream)));
}

ffi::Error GaussianRasterizeXlaBackward(cudaStream_t stream, ffi::AnyBuffer means2d, ffi::AnyBuffer conics,
                                        ffi::AnyBuffer colors, ffi::AnyBuffer opacities, ffi::AnyBuffer background,
                                        ffi::AnyBuffer ids, ffi::AnyBuffer ranges, ffi::AnyBuffer alpha,
                                        ffi::AnyBuffer last_ids, ffi::AnyBuffer grad_image, ffi::AnyBuffer grad_alpha,
                                        RetBuffer grad_means2d, RetBuffer grad_conics, RetBuffer grad_colors,
                                        RetBuffer grad_opacities, RetBuffer grad_background, Attrs a) {
  gaussian_rasterize::Sizes s;
  ffi::Error error = GaussianRasterizeXlaSizes(a, means2d, conics, colors, opacities, background, ids, ranges, &s);
  if (error.failure()) return error;
  const gaussian_rasterize::BackwardArgs t{
      Data<float>(means2d),     Data<float>(conics),      Data<float>(colors),
      Data<float>(opacities),   Data<float>(background),  Data<int32_t>(ids),
      Data<int32_t>(ranges),    Data<float>(alpha),       Data<int32_t>(last_ids),
      Data<float>(grad_image),  Data<float>(grad_alpha),  Data<float>(grad_means2d),
      Data<float>(grad_conics), Data<float>(grad_colors), Data<float>(grad_opacities),
      Data<float>(grad_background)};
  return ToError(
      cuda::LaunchStatus("GaussianRasterizeGrad", cuda::LaunchGaussianRasterizeBackward(t, s, a, stream)));
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianRasterize", "CUDA", GaussianRasterizeXlaForward,
                   BindStreamBuffers<7, 3>().Attrs<Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsGaussianRasterizeGrad", "CUDA", GaussianRasterizeXlaBackward,
                   BindStreamBuffers<11, 5>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::xla_ffi
#endif  // MO_XLA
#endif  // GOOGLE_CUDA
