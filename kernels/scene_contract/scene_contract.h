// SceneContract, mip-NeRF 360's contraction of an unbounded scene into a ball
// of radius 2 (Barron et al. 2022, eq. 10):
//   contract(x) = x                          if ||x|| <= 1
//                 (2 - 1 / ||x||) x / ||x||  otherwise,
// with ||.|| the L2 norm (mip-NeRF 360) or the L-infinity norm (instant-NGP's
// and nerfacc's cube), and its vector-Jacobian product; written once for the
// CPU kernels, CUDA, the Metal shaders and the MSL shim. This header is the
// op's one description shared by every backend: the formulas, the op's
// declaration (its attribute list, MO_SCENE_CONTRACT_ATTRS) and, in host
// code, the attributes and checks that follow from it, the shape checks, the
// Metal plans' and CUDA launchers' signatures. The op's files
// (docs/ADDING_AN_OP.md):
//   scene_contract_op.cc    REGISTER_OP                 scene_contract_cpu.cc    CPU kernels
//   scene_contract.cu.cc    CUDA kernels, launchers     scene_contract_cuda.cc   TF GPU kernels
//   scene_contract.metal    Metal shaders               scene_contract_metal.cc  Metal plans, tensorflow-metal glue
//
// Numerics: beyond ||x|| = 1e30 the norm is taken of x / max|x_i|, so every
// finite point is contracted without overflow; a point with an infinite coordinate (and no
// NaN) is the limit along its infinite coordinates (contract = 2 w, gradient
// 0); a NaN coordinate makes the whole point's output and gradient NaN.
#ifndef MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_H_
#define MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_H_

#include "kernels/common/platform.h"

namespace mo {

// The values of the attribute 'norm', in the order of its choices (below).
enum SceneContractNorm {
  kSceneContractL2 = 0,
  kSceneContractLinf = 1,
};

// Arguments of a dispatch (same layout in the shader and on the host).
struct SceneContractParams {
  int64 num_points;  // x, y, grad and dx are [num_points, 3]
};

// The shaders' buffer indices (scene_contract.metal, the plans of scene_contract_metal.cc).
enum SceneContractBuffers {
  kSceneContractX = 0,           // forward: x
  kSceneContractY = 1,           // forward: the contracted points
  kSceneContractParams = 2,      // forward: SceneContractParams
  kSceneContractGradGrad = 0,    // backward: grad of the contracted points
  kSceneContractGradX = 1,       // backward: x
  kSceneContractGradDx = 2,      // backward: grad of x
  kSceneContractGradParams = 3,  // backward: SceneContractParams
};

// ||p|| of p = (x, y, z) in `norm` and, where it is above 1, w = p / ||p||
// (inside the unit ball w = p, which the forward scales by 1). NaN in p: NaN and w
// NaN; an infinite coordinate: inf, w the unit vector along the infinite ones.
MO_FN float scene_contract_unit(float x, float y, float z, int norm, MO_THREAD float* w) {
  w[0] = x;
  w[1] = y;
  w[2] = z;
  if (isnan_f(x) || isnan_f(y) || isnan_f(z)) {
    w[0] = w[1] = w[2] = NAN;
    return NAN;
  }
  const float ax = fabs_f(x), ay = fabs_f(y), az = fabs_f(z);
  float m = ax > ay ? ax : ay;
  m = m > az ? m : az;
  // The common case: one square root (L2) and one division (1 / r stays a
  // normal number: subnormals are flushed to 0 on TensorFlow's CPU threads).
  const float r = norm == kSceneContractL2 ? sqrt_f(x * x + y * y + z * z) : m;
  if (r <= 1.0f) return r;
  if (r < 1.0e30f) {
    const float inv_r = 1.0f / r;
    w[0] = x * inv_r;
    w[1] = y * inv_r;
    w[2] = z * inv_r;
    return r;
  }
  // Far away (the sum of squares may have overflowed) or infinite: u = p / max|p_i|.
  float u0 = x / m, u1 = y / m, u2 = z / m;  // max |u_i| = 1
  if (isinf_f(m)) {
    u0 = isinf_f(x) ? (x > 0.0f ? 1.0f : -1.0f) : 0.0f;
    u1 = isinf_f(y) ? (y > 0.0f ? 1.0f : -1.0f) : 0.0f;
    u2 = isinf_f(z) ? (z > 0.0f ? 1.0f : -1.0f) : 0.0f;
  }
  const float n = norm == kSceneContractL2 ? sqrt_f(u0 * u0 + u1 * u1 + u2 * u2) : 1.0f;  // ||u||
  w[0] = u0 / n;
  w[1] = u1 / n;
  w[2] = u2 / n;
  return m * n;
}

// out[0..2] = contract(x, y, z) (inside the unit ball, w = p and the scale 1).
MO_FN void scene_contract_forward(float x, float y, float z, int norm, MO_THREAD float* out) {
  float w[3];
  const float r = scene_contract_unit(x, y, z, norm, w);
  const float scale = r <= 1.0f ? 1.0f : 2.0f - 1.0f / r;
  out[0] = scale * w[0];
  out[1] = scale * w[1];
  out[2] = scale * w[2];
}

// dx[0..2] = g^T d contract / d(x, y, z). Outside the unit ball, with
// r = ||x||, w = x / r, s = (2 - 1/r) / r and c = 2 (1 - 1/r) / r:
//   L2:   dx = s g - c (g . w) w
//   Linf: dx = s g - c (g . w) sign(w_k) e_k, k the first index of max |x_i|
// (the gradient is continuous at r = 1, where s = 1 and c = 0).
MO_FN void scene_contract_grad(float x, float y, float z, int norm, float g0, float g1, float g2,
                               MO_THREAD float* dx) {
  float w[3];
  const float r = scene_contract_unit(x, y, z, norm, w);
  if (r <= 1.0f) {
    dx[0] = g0;
    dx[1] = g1;
    dx[2] = g2;
    return;
  }
  const float inv_r = 1.0f / r;
  const float s = (2.0f - inv_r) * inv_r;
  const float c = 2.0f * (1.0f - inv_r) * inv_r;
  const float t = c * (g0 * w[0] + g1 * w[1] + g2 * w[2]);
  dx[0] = s * g0;
  dx[1] = s * g1;
  dx[2] = s * g2;
  if (norm == kSceneContractL2) {
    dx[0] -= t * w[0];
    dx[1] -= t * w[1];
    dx[2] -= t * w[2];
    return;
  }
  const float a0 = fabs_f(w[0]), a1 = fabs_f(w[1]), a2 = fabs_f(w[2]);
  const int k = a0 >= a1 ? (a0 >= a2 ? 0 : 2) : (a1 >= a2 ? 1 : 2);
  dx[k] -= t * (w[k] > 0.0f ? 1.0f : -1.0f);
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsSceneContract(x [..., 3]) -> y (x's shape) and
// MetalOpsSceneContractGrad(grad, x) -> dx, T in {float, half}.
#define MO_SCENE_CONTRACT_ATTRS(ATTR) ATTR(norm, Enum, ::mo::kSceneContractL2, "l2", "linf")

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace scene_contract {

// Attrs { int norm; } (a SceneContractNorm), ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("SceneContract", MO_SCENE_CONTRACT_ATTRS);
static_assert(kSceneContractL2 == 0 && kSceneContractLinf == 1, "SceneContractNorm follows the choices of 'norm'");

// A point of the kernels (kernels/framework/pointwise_kernel.h): x, y, z.
constexpr int64_t kPointSize = 3;

// The checks, written once for the shape functions, the TensorFlow kernels
// and the Metal glue. No TensorFlow API: sizes in, kernels/spec/checks.h's
// Result out; -1 is an unknown dimension (shape functions) and matches any
// size. Messages name the argument; tests match on them.
// x [..., 3]: at least one dimension, the last one 3 (x, y, z).
inline Result XShape(const Dims& x) {
  if (x.empty()) return Invalid("SceneContract: 'x' must be [..., 3] (points along the last axis), got a scalar");
  if (x.back() != 3 && x.back() != -1) {
    return Invalid("SceneContract: 'x' must be [..., 3] (points along the last axis), got shape ", ShapeString(x));
  }
  return Ok();
}

// The upstream gradient of SceneContractGrad: x's shape.
inline Result GradShape(const Dims& grad, const Dims& x) {
  bool same = grad.size() == x.size();
  for (size_t d = 0; same && d < x.size(); ++d) same = grad[d] == x[d] || grad[d] == -1 || x[d] == -1;
  if (!same) {
    return Invalid("SceneContractGrad: 'grad' must have the shape of 'x' ", ShapeString(x), ", got ",
                   ShapeString(grad));
  }
  return Ok();
}

// SceneContract's checks (shape function and kernels): x, and y's dims (x's);
// SceneContractGrad's: x, then the upstream gradient (kernels/spec/pointwise_op.h,
// kernels/framework/pointwise_kernel.h).
inline Result Shapes(const Attrs&, const Dims& x, Dims* y) {
  *y = x;
  return XShape(x);
}

inline Result GradShapes(const Attrs&, const Dims& grad, const Dims& x) {
  MO_RETURN_IF_INVALID(XShape(x));
  return GradShape(grad, x);
}

}  // namespace scene_contract
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (scene_contract_metal.cc), every Metal path's
// (kernels/metal_plan/plan.h): one thread per point, the entry point picked
// by norm and dtype; forward slots {x, y}, backward {grad, x, dx}, each [n, 3]; n > 0 points.
namespace mo::metal_plan {
enum SceneContractSlots { kSceneContractSlotX, kSceneContractSlotY, kSceneContractSlots };
enum SceneContractGradSlots {
  kSceneContractGradSlotGrad,
  kSceneContractGradSlotX,
  kSceneContractGradSlotDx,
  kSceneContractGradSlots
};
Plan SceneContractForward(Dtype dtype, int64_t n, const scene_contract::Attrs& a);
Plan SceneContractBackward(Dtype dtype, int64_t n, const scene_contract::Attrs& a);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// The CUDA launchers (scene_contract.cu.cc), plain C++: the TF GPU kernels
// (scene_contract_cuda.cc) and the C-ABI harness
// (tests/cuda/scene_contract_harness.cu.cc). T is float or __half (computed in float).
namespace mo::cuda {
// y[i, :] = contract(x[i, :]) for n points [n, 3] in the attributes' norm.
template <typename T>
cudaError_t LaunchSceneContractForward(const T* x, T* y, int64_t n, const scene_contract::Attrs& a,
                                       cudaStream_t stream);
// dx[i, :] = grad[i, :]^T d contract / d x[i, :].
template <typename T>
cudaError_t LaunchSceneContractBackward(const T* grad, const T* x, T* dx, int64_t n, const scene_contract::Attrs& a,
                                        cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA
#endif  // host code

#endif  // MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_H_
