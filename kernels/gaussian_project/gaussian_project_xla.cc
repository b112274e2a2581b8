// The XLA kernels of MetalOpsGaussianProject / MetalOpsGaussianProjectGrad
// (kernels/xla/xla_kernel.h), which emit the calls that their handlers take,
// with the op's attributes (FfiAttrsOf): the host handlers of
// gaussian_project_cpu.cc, the CUDA handlers of gaussian_project_cuda.cc. The
// shape checks run while XLA compiles; the check of the Gaussians' values
// runs in the handlers (as in the TensorFlow kernels) and comes back as an
// XLA error naming the first refused Gaussian.
#include "kernels/xla/xla_kernel.h"  // first: includes kernels/framework/tf_eigen.h

#include <cstdint>

#include "kernels/gaussian_project/gaussian_project.h"

namespace mo {
namespace xla_kernels {
namespace {

// The checks of means, quats, scales, (opacities where `with_opacities`,)
// viewmat, intrinsics (inputs from `first` on).
absl::Status GaussianProjectInputs(XlaOpKernelContext* ctx, int first, bool with_opacities) {
  const Dims opacities = with_opacities ? InputDims(ctx, first + 3) : Dims();
  const int camera = first + (with_opacities ? 4 : 3);
  return checks::ToStatus(gaussian_project::Shapes(InputDims(ctx, first), InputDims(ctx, first + 1),
                                                   InputDims(ctx, first + 2), with_opacities ? &opacities : nullptr,
                                                   InputDims(ctx, camera), InputDims(ctx, camera + 1)));
}

void CompileGaussianProject(XlaOpKernelContext* ctx, const gaussian_project::Attrs& attrs) {
  OP_REQUIRES_OK(ctx, GaussianProjectInputs(ctx, 0, true));
  const int64_t n = InputDims(ctx, 0)[0];
  EmitFfiCall(ctx, "MetalOpsGaussianProject", InputsUpTo(ctx, 6),
              {ArrayShape(::xla::F32, {n, 2}), ArrayShape(::xla::F32, {n, 3}), ArrayShape(::xla::F32, {n}),
               ArrayShape(::xla::S32, {n, 2})},
              FfiAttrsOf(attrs));
}

void CompileGaussianProjectGrad(XlaOpKernelContext* ctx, const gaussian_project::Attrs& attrs) {
  OP_REQUIRES_OK(ctx, GaussianProjectInputs(ctx, 3, false));
  OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_project::GradShapes(InputDims(ctx, 3), InputDims(ctx, 0),
                                                                    InputDims(ctx, 1), InputDims(ctx, 2),
                                                                    InputDims(ctx, 8))));
  EmitFfiCall(ctx, "MetalOpsGaussianProjectGrad", InputsUpTo(ctx, 9),
              {ShapeLike(ctx, 3), ShapeLike(ctx, 4), ShapeLike(ctx, 5)}, FfiAttrsOf(attrs));
}

MO_REGISTER_XLA_OP_AND_GRAD("MetalOpsGaussianProject", gaussian_project::Attrs, CompileGaussianProject);

}  // namespace
}  // namespace xla_kernels
}  // namespace mo
