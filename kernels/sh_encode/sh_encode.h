// SHEncode: the real spherical harmonics of a direction, bands 0..degree-1
// (degree**2 values), and their gradient. This header is the op's one
// description shared by every backend: the formulas (written once for the CPU
// kernels, CUDA, the Metal shaders and the MSL shim), the op's declaration
// (its attribute list, MO_SH_ENCODE_ATTRS) and, in host code, the attributes
// and checks that follow from it, the shape checks, the Metal plans'
// signatures and the CUDA launchers'. The op's files (docs/ADDING_AN_OP.md):
//   sh_encode_op.cc     REGISTER_OP                 sh_encode_cpu.cc    CPU kernels, XLA host handlers
//   sh_encode.cu.cc     CUDA kernels, launchers     sh_encode_cuda.cc   TF GPU kernels, XLA CUDA handlers
//   sh_encode.metal     Metal shaders               sh_encode_metal.cc  Metal plans, tensorflow-metal glue
//   sh_encode_xla.cc    XLA op kernels
//
// The order, signs and normalisation are those of the NeRF sample's TF
// sh_encode (examples/nerf/model.py), which are instant-NGP's:
//   band 0: Y0 = C0
//   band 1: Y1..3 = -C1 y, C1 z, -C1 x
//   band 2: Y4..8 = C2 xy, -C2 yz, C3 zz - C4, -C2 xz, C5 (xx - yy)
//   band 3: Y9..15 = C6 y (yy - 3xx), C7 xyz, C8 y (1 - 5zz), C9 z (5zz - 3),
//                    C8 x (1 - 5zz), C10 z (xx - yy), C6 x (3yy - xx)
// The direction is used as given (not normalised), as the sample does, so
// the values are these polynomials for any (x, y, z), and NaN / inf
// propagate as they do through the TF ops.
#ifndef MO_KERNELS_SH_ENCODE_SH_ENCODE_H_
#define MO_KERNELS_SH_ENCODE_SH_ENCODE_H_

#include "kernels/common/platform.h"

// The coefficients, as the sample writes them (rounded to float here).
#define MO_SH_C0 0.28209479177387814f   // 1 / (2 sqrt(pi))
#define MO_SH_C1 0.48860251190291987f   // sqrt(3 / (4 pi))
#define MO_SH_C2 1.0925484305920792f    // sqrt(15 / (4 pi))
#define MO_SH_C3 0.94617469575755997f   // 3 sqrt(5 / (16 pi))
#define MO_SH_C4 0.31539156525251999f   // sqrt(5 / (16 pi))
#define MO_SH_C5 0.54627421529603959f   // sqrt(15 / (16 pi))
#define MO_SH_C6 0.59004358992664352f   // sqrt(35 / (32 pi))
#define MO_SH_C7 2.8906114426405538f    // sqrt(105 / (4 pi))
#define MO_SH_C8 0.45704579946446572f   // sqrt(21 / (32 pi))
#define MO_SH_C9 0.3731763325901154f    // sqrt(7 / (16 pi))
#define MO_SH_C10 1.4453057213202769f   // sqrt(105 / (16 pi))

#define MO_SH_MAX_DEGREE 4
#define MO_SH_MAX_OUTPUTS 16  // MO_SH_MAX_DEGREE**2

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
struct SHEncodeParams {
  int64 num_points;  // dirs is [num_points, 3], the values [num_points, degree**2]
};

// The shaders' buffer indices (sh_encode.metal, the plans of sh_encode_metal.cc).
enum SHEncodeBuffers {
  kSHEncodeDirs = 0,        // forward: dirs
  kSHEncodeValues = 1,      // forward: values
  kSHEncodeParams = 2,      // forward: SHEncodeParams
  kSHEncodeGradGrad = 0,    // backward: grad of the values
  kSHEncodeGradDirs = 1,    // backward: dirs
  kSHEncodeGradOut = 2,     // backward: grad_dirs
  kSHEncodeGradParams = 3,  // backward: SHEncodeParams
};

// out[k * stride] = Y_k(x, y, z) for k < degree**2 (degree in 1..4; with a
// compile-time degree every branch folds away).
MO_FN void sh_encode_values(float x, float y, float z, int degree, MO_THREAD float* out, int stride) {
  out[0] = MO_SH_C0;
  if (degree <= 1) return;
  out[1 * stride] = -MO_SH_C1 * y;
  out[2 * stride] = MO_SH_C1 * z;
  out[3 * stride] = -MO_SH_C1 * x;
  if (degree <= 2) return;
  const float xx = x * x, yy = y * y, zz = z * z;
  out[4 * stride] = MO_SH_C2 * x * y;
  out[5 * stride] = -MO_SH_C2 * y * z;
  out[6 * stride] = MO_SH_C3 * zz - MO_SH_C4;
  out[7 * stride] = -MO_SH_C2 * x * z;
  out[8 * stride] = MO_SH_C5 * (xx - yy);
  if (degree <= 3) return;
  out[9 * stride] = MO_SH_C6 * y * (-3.0f * xx + yy);
  out[10 * stride] = MO_SH_C7 * x * y * z;
  out[11 * stride] = MO_SH_C8 * y * (1.0f - 5.0f * zz);
  out[12 * stride] = MO_SH_C9 * z * (5.0f * zz - 3.0f);
  out[13 * stride] = MO_SH_C8 * x * (1.0f - 5.0f * zz);
  out[14 * stride] = MO_SH_C10 * z * (xx - yy);
  out[15 * stride] = MO_SH_C6 * x * (-xx + 3.0f * yy);
}

// (*dx, *dy, *dz) = sum_k g[k * stride] * dY_k/d(x, y, z) for k < degree**2:
// the vector-Jacobian product of sh_encode_values, term by term:
//   Y1..3:  dY1/dy = -C1, dY2/dz = C1, dY3/dx = -C1
//   Y4 = C2 xy        -> (C2 y, C2 x, 0)
//   Y5 = -C2 yz       -> (0, -C2 z, -C2 y)
//   Y6 = C3 zz - C4   -> (0, 0, 2 C3 z)
//   Y7 = -C2 xz       -> (-C2 z, 0, -C2 x)
//   Y8 = C5 (xx - yy) -> (2 C5 x, -2 C5 y, 0)
//   Y9 = C6 y (yy - 3xx)    -> (-6 C6 xy, 3 C6 (yy - xx), 0)
//   Y10 = C7 xyz            -> (C7 yz, C7 xz, C7 xy)
//   Y11 = C8 y (1 - 5zz)    -> (0, C8 (1 - 5zz), -10 C8 yz)
//   Y12 = C9 z (5zz - 3)    -> (0, 0, C9 (15zz - 3))
//   Y13 = C8 x (1 - 5zz)    -> (C8 (1 - 5zz), 0, -10 C8 xz)
//   Y14 = C10 z (xx - yy)   -> (2 C10 xz, -2 C10 yz, C10 (xx - yy))
//   Y15 = C6 x (3yy - xx)   -> (3 C6 (yy - xx), 6 C6 xy, 0)
MO_FN void sh_encode_grad(float x, float y, float z, int degree, const MO_THREAD float* g, int stride,
                          MO_THREAD float* dx, MO_THREAD float* dy, MO_THREAD float* dz) {
  float gx = 0.0f, gy = 0.0f, gz = 0.0f;
  if (degree >= 2) {
    gx -= MO_SH_C1 * g[3 * stride];
    gy -= MO_SH_C1 * g[1 * stride];
    gz += MO_SH_C1 * g[2 * stride];
  }
  if (degree >= 3) {
    const float g4 = g[4 * stride], g5 = g[5 * stride], g6 = g[6 * stride], g7 = g[7 * stride],
                g8 = g[8 * stride];
    gx += MO_SH_C2 * (g4 * y - g7 * z) + 2.0f * MO_SH_C5 * g8 * x;
    gy += MO_SH_C2 * (g4 * x - g5 * z) - 2.0f * MO_SH_C5 * g8 * y;
    gz += 2.0f * MO_SH_C3 * g6 * z - MO_SH_C2 * (g5 * y + g7 * x);
  }
  if (degree >= 4) {
    const float g9 = g[9 * stride], g10 = g[10 * stride], g11 = g[11 * stride], g12 = g[12 * stride],
                g13 = g[13 * stride], g14 = g[14 * stride], g15 = g[15 * stride];
    const float xx = x * x, yy = y * y, zz = z * z;
    const float xy = x * y, xz = x * z, yz = y * z;
    const float b = 1.0f - 5.0f * zz;             // dY11/dy / C8 = dY13/dx / C8
    const float d = 3.0f * MO_SH_C6 * (yy - xx);  // dY9/dy = dY15/dx
    gx += -6.0f * MO_SH_C6 * g9 * xy + MO_SH_C7 * g10 * yz + MO_SH_C8 * g13 * b +
          2.0f * MO_SH_C10 * g14 * xz + g15 * d;
    gy += g9 * d + MO_SH_C7 * g10 * xz + MO_SH_C8 * g11 * b - 2.0f * MO_SH_C10 * g14 * yz +
          6.0f * MO_SH_C6 * g15 * xy;
    gz += MO_SH_C7 * g10 * xy - 10.0f * MO_SH_C8 * (g11 * yz + g13 * xz) +
          MO_SH_C9 * g12 * (15.0f * zz - 3.0f) + MO_SH_C10 * g14 * (xx - yy);
  }
  *dx = gx;
  *dy = gy;
  *dz = gz;
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsSHEncode(dirs [..., 3]) -> values [..., degree**2] and
// MetalOpsSHEncodeGrad(grad, dirs) -> grad_dirs, T in {float, half}.
#define MO_SH_ENCODE_ATTRS(ATTR) ATTR(degree, Int, 4, 1, MO_SH_MAX_DEGREE)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace sh_encode {

// Attrs { int degree; }, ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("SHEncode", MO_SH_ENCODE_ATTRS);

// A point of the kernels (kernels/framework/pointwise_kernel.h): one direction.
constexpr int64_t kPointSize = 3;

// The checks, written once for the shape functions, the TensorFlow kernels,
// the Metal glue and XLA's op kernels. No TensorFlow API: sizes in,
// kernels/spec/checks.h's Result out; -1 is an unknown dimension (shape
// functions) and matches any size. Messages name the argument; tests match on
// them. dirs [..., 3]: at least one dimension, the last one 3 (x, y, z).
inline Result DirsShape(const Dims& dirs) {
  if (dirs.empty()) return Invalid("SHEncode: 'dirs' must be [..., 3] (x, y, z along the last axis), got a scalar");
  if (dirs.back() != 3 && dirs.back() != -1) {
    return Invalid("SHEncode: 'dirs' must be [..., 3] (x, y, z along the last axis), got shape ", ShapeString(dirs));
  }
  return Ok();
}

// The values' shape: dirs' with the last dimension degree**2.
inline Dims OutputDims(const Dims& dirs, const Attrs& a) {
  Dims out = dirs;
  out.back() = int64_t{a.degree} * a.degree;
  return out;
}

// The upstream gradient of SHEncodeGrad: the values' shape.
inline Result GradShape(const Dims& grad, const Dims& dirs, const Attrs& a) {
  const Dims want = OutputDims(dirs, a);
  bool same = grad.size() == want.size();
  for (size_t d = 0; same && d < want.size(); ++d) same = grad[d] == want[d] || grad[d] == -1 || want[d] == -1;
  if (!same) {
    return Invalid("SHEncodeGrad: 'grad' must have the values' shape ", ShapeString(want), " for 'dirs' ",
                   ShapeString(dirs), " and degree ", a.degree, ", got ", ShapeString(grad));
  }
  return Ok();
}

// SHEncode's checks (shape function and kernels): dirs, and the values' dims;
// SHEncodeGrad's: dirs, then the upstream gradient (kernels/spec/pointwise_op.h,
// kernels/framework/pointwise_kernel.h).
inline Result Shapes(const Attrs& a, const Dims& dirs, Dims* values) {
  MO_RETURN_IF_INVALID(DirsShape(dirs));
  *values = OutputDims(dirs, a);
  return Ok();
}

inline Result GradShapes(const Attrs& a, const Dims& grad, const Dims& dirs) {
  MO_RETURN_IF_INVALID(DirsShape(dirs));
  return GradShape(grad, dirs, a);
}

}  // namespace sh_encode
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (sh_encode_metal.cc): which shader, which tensor slot at
// which of its buffer indices (above), how many threads. Built from shapes and
// attributes only; every Metal path runs them (kernels/metal_plan/plan.h):
// forward slots {dirs, values}, backward {grad, dirs, grad_dirs}; n > 0 directions.
namespace mo::metal_plan {
enum SHEncodeSlots { kSHEncodeSlotDirs, kSHEncodeSlotValues, kSHEncodeSlots };
enum SHEncodeGradSlots { kSHEncodeGradSlotGrad, kSHEncodeGradSlotDirs, kSHEncodeGradSlotOut, kSHEncodeGradSlots };
Plan SHEncodeForward(Dtype dtype, int64_t n, const sh_encode::Attrs& a);
Plan SHEncodeBackward(Dtype dtype, int64_t n, const sh_encode::Attrs& a);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// The CUDA launchers (sh_encode.cu.cc), plain C++ (no TensorFlow): the TF GPU
// kernels and XLA's CUDA handlers (sh_encode_cuda.cc) and the C-ABI harness
// (tests/cuda/sh_encode_harness.cu.cc). T is float or __half (computed in
// float); a degree outside 1..4 gives cudaErrorInvalidValue.
namespace mo::cuda {
// values [n, degree**2] of dirs [n, 3].
template <typename T>
cudaError_t LaunchSHEncodeForward(const T* dirs, T* values, int64_t n, const sh_encode::Attrs& a,
                                  cudaStream_t stream);
// grad_dirs [n, 3] = sum_k grad[:, k] dY_k/d dirs, grad [n, degree**2].
template <typename T>
cudaError_t LaunchSHEncodeBackward(const T* grad, const T* dirs, T* grad_dirs, int64_t n, const sh_encode::Attrs& a,
                                   cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA
#endif  // host code

#endif  // MO_KERNELS_SH_ENCODE_SH_ENCODE_H_
