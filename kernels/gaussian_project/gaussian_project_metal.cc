// GaussianProject on Metal: the op's Metal plans (which shader of
// gaussian_project.metal, one thread per Gaussian, which tensor slot at which
// buffer index; every Metal path runs them: the CPU kernels' offload, the MSL
// shim, tensorflow-metal) and, on macOS, its kernels on the Metal
// PluggableDevice ("GPU" with tensorflow-metal) through the shared glue
// (kernels/metal/metal_kernel.h), float32.
//
// The Gaussians' values are not checked on Metal (that would need a
// read-back and a wait on the command buffer): a NaN mean or a zero
// quaternion makes the 2D covariance's determinant NaN, and the Gaussian is
// culled.
#include "kernels/gaussian_project/gaussian_project.h"

namespace mo::metal_plan {

namespace {
GaussianProjectParams ParamsOf(int64_t n, const gaussian_project::Attrs& a) {
  return GaussianProjectParams{n, a.width, a.height, a.near_plane, a.far_plane, a.eps2d, 0.0f};
}
}  // namespace

Plan GaussianProjectForward(int64_t n, const gaussian_project::Attrs& a) {
  return OnePass(kGaussianProjectSlots, "gaussian_project", "gaussian_project_forward", static_cast<uint64_t>(n),
                 {{kGaussianProjectMeans, kGaussianProjectSlotMeans},
                  {kGaussianProjectQuats, kGaussianProjectSlotQuats},
                  {kGaussianProjectScales, kGaussianProjectSlotScales},
                  {kGaussianProjectOpacities, kGaussianProjectSlotOpacities},
                  {kGaussianProjectViewmat, kGaussianProjectSlotViewmat},
                  {kGaussianProjectK, kGaussianProjectSlotK}},
                 {{kGaussianProjectMeans2d, kGaussianProjectSlotMeans2d},
                  {kGaussianProjectConics, kGaussianProjectSlotConics},
                  {kGaussianProjectDepths, kGaussianProjectSlotDepths},
                  {kGaussianProjectRadii, kGaussianProjectSlotRadii}},
                 kGaussianProjectParams, ParamsOf(n, a));
}

Plan GaussianProjectBackward(int64_t n, const gaussian_project::Attrs& a) {
  return OnePass(kGaussianProjectGradSlots, "gaussian_project", "gaussian_project_backward", static_cast<uint64_t>(n),
                 {{kGaussianProjectGradMeans2d, kGaussianProjectGradSlotGradMeans2d},
                  {kGaussianProjectGradConics, kGaussianProjectGradSlotGradConics},
                  {kGaussianProjectGradDepths, kGaussianProjectGradSlotGradDepths},
                  {kGaussianProjectGradMeans, kGaussianProjectGradSlotMeans},
                  {kGaussianProjectGradQuats, kGaussianProjectGradSlotQuats},
                  {kGaussianProjectGradScales, kGaussianProjectGradSlotScales},
                  {kGaussianProjectGradViewmat, kGaussianProjectGradSlotViewmat},
                  {kGaussianProjectGradK, kGaussianProjectGradSlotK},
                  {kGaussianProjectGradRadii, kGaussianProjectGradSlotRadii}},
                 {{kGaussianProjectGradOutMeans, kGaussianProjectGradSlotOutMeans},
                  {kGaussianProjectGradOutQuats, kGaussianProjectGradSlotOutQuats},
                  {kGaussianProjectGradOutScales, kGaussianProjectGradSlotOutScales}},
                 kGaussianProjectGradParams, ParamsOf(n, a));
}

}  // namespace mo::metal_plan

#if defined(__APPLE__)
#include "kernels/metal/metal_kernel.h"

namespace {

using mo::metal::DimsOf;
using mo::gaussian_project::Attrs;

// The inputs means, quats, scales, (opacities where `count` is 6,) viewmat, K
// from input `first` on, checked.
bool Inputs(mo::metal::KernelCall& call, int first, int count, TF_Tensor* in[6]) {
  for (int k = 0; k < count; ++k) in[k] = call.Input(first + k);
  if (!call.ok()) return false;
  const mo::Dims opacities = count == 6 ? DimsOf(in[3]) : mo::Dims();
  return call.Check(mo::gaussian_project::Shapes(DimsOf(in[0]), DimsOf(in[1]), DimsOf(in[2]),
                                                 count == 6 ? &opacities : nullptr, DimsOf(in[count - 2]),
                                                 DimsOf(in[count - 1])));
}

void Forward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* in[6];
  if (!Inputs(call, 0, 6, in)) return;
  const int64_t n = TF_Dim(in[0], 0);
  TF_Tensor* means2d = call.Output(0, TF_FLOAT, {n, 2});
  TF_Tensor* conics = call.Output(1, TF_FLOAT, {n, 3});
  TF_Tensor* depths = call.Output(2, TF_FLOAT, {n});
  TF_Tensor* radii = call.Output(3, TF_INT32, {n, 2});
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::GaussianProjectForward(n, a),
               {in[0], in[1], in[2], in[3], in[4], in[5], means2d, conics, depths, radii});
}

void Backward(void* kernel, mo::metal::KernelCall& call) {
  const Attrs& a = *static_cast<Attrs*>(kernel);
  TF_Tensor* in[6];
  if (!Inputs(call, 3, 5, in)) return;
  TF_Tensor* g_means2d = call.Input(0);
  TF_Tensor* g_conics = call.Input(1);
  TF_Tensor* g_depths = call.Input(2);
  TF_Tensor* radii = call.Input(8);
  if (!call.ok() || !call.Check(mo::gaussian_project::GradShapes(DimsOf(in[0]), DimsOf(g_means2d), DimsOf(g_conics),
                                                                  DimsOf(g_depths), DimsOf(radii)))) {
    return;
  }
  const int64_t n = TF_Dim(in[0], 0);
  TF_Tensor* g_means = call.Output(0, TF_FLOAT, {n, 3});
  TF_Tensor* g_quats = call.Output(1, TF_FLOAT, {n, 4});
  TF_Tensor* g_scales = call.Output(2, TF_FLOAT, {n, 3});
  if (!call.ok() || n == 0) return;
  call.RunPlan(mo::metal_plan::GaussianProjectBackward(n, a), {g_means2d, g_conics, g_depths, in[0], in[1], in[2],
                                                               in[3], in[4], radii, g_means, g_quats, g_scales});
}

const bool registered_forward = mo::metal::RegisterWithAttrs<Attrs>(
    "MetalOpsGaussianProject", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<Forward>);
const bool registered_backward = mo::metal::RegisterWithAttrs<Attrs>(
    "MetalOpsGaussianProjectGrad", {mo::metal::kNoTypeConstraint}, &mo::metal::Compute<Backward>);

}  // namespace
#endif  // __APPLE__
