// GaussianRasterize on CUDA through TensorFlow: the TF GPU kernels of
// MetalOpsGaussianRasterize / MetalOpsGaussianRasterizeGrad (the kernel classes of
// gaussian_rasterize.h over the CUDA functor below), which run the launchers of
// gaussian_rasterize.cu.cc on the op's stream. The shapes are checked as on the
// CPU; the index values are not read back to the host: the kernels skip ids
// and clamp ranges outside their bounds. Compiled only when the installed
// TensorFlow is a CUDA build (and into `make cuda-lib`); here `make cuda-check`
// syntax-checks it.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include "kernels/cuda/tf_gpu.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/spec/checks_tf.h"
#include "tensorflow/core/framework/op_kernel.h"
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
#endif  // GOOGLE_CUDA
