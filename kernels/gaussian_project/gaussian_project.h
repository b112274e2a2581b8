// GaussianProject: 3D Gaussians (means, rotations as quaternions, scales)
// seen by a pinhole camera become 2D Gaussians on the image: their means in
// pixels, conics (inverse 2D covariances), depths and radii (x, y), Gaussians
// too transparent, behind the near plane, beyond the far plane or off screen
// culled; and the gradient of the means, quaternions and scales. This header is the op's one
// description shared by every backend: the formulas (written once for the CPU
// kernels, CUDA, the Metal shaders and the MSL shim), the op's declaration
// (its attribute list, MO_GAUSSIAN_PROJECT_ATTRS) and, in host code, the
// checks, the Metal plans' and CUDA launchers' signatures and the TensorFlow
// kernel classes. The op's files (docs/ADDING_AN_OP.md):
//   gaussian_project_op.cc     REGISTER_OP                 gaussian_project_cpu.cc    CPU kernels
//   gaussian_project.cu.cc     CUDA kernels, launchers     gaussian_project_cuda.cc   TF GPU kernels
//   gaussian_project.metal     Metal shaders               gaussian_project_metal.cc  Metal plans, tensorflow-metal glue
//
// The formulas are gsplat's (nerfstudio-project/gsplat, "classic" 3DGS
// without antialiasing compensation; docs/GAUSSIAN_PROJECT.md). For one
// Gaussian with mean p, quaternion q = (w, x, y, z), scales s, opacity o and
// the camera [W | w] (world to camera, OpenCV axes), K (fx, fy, cx, cy):
//   R = rotation of q / |q|,  M = R diag(s),  Sigma = M M^T
//   t = W p + w;  culled when t.z < near_plane or t.z > far_plane
//   Sigma_c = W Sigma W^T = A A^T with A = W M
//   J = [[fx / t.z, 0, -fx tx / t.z^2], [0, fy / t.z, -fy ty / t.z^2]] with
//       tx = t.z clamp(t.x / t.z, -(cx / fx + 0.3 tan_x), (width - cx) / fx + 0.3 tan_x),
//       tan_x = width / (2 fx) (ty likewise with fy, cy, height)
//   Sigma' = J Sigma_c J^T + eps2d I = [[a, b], [b, c]]; culled unless det = ac - b^2 > 0
//   conic = (c, -b, a) / det;  mean2d = (fx t.x / t.z + cx, fy t.y / t.z + cy);  depth = t.z
//   culled unless o >= MO_GS_ALPHA_MIN (1/255; a NaN opacity is culled)
//   extend = min(3.33, sqrt(2 log(o / MO_GS_ALPHA_MIN)))
//   radius = (ceil(extend sqrt(a)), ceil(extend sqrt(c)))   (culled unless both are > 0)
//   culled when the box mean2d +- radius lies wholly off the image
//            (u + rx <= 0, u - rx >= width, v + ry <= 0 or v - ry >= height).
// The box is gsplat 1.5.3's opacity-aware one: outside it the rasterizer's
// alpha o exp(-sigma) is below MO_GS_ALPHA_MIN (sigma >= dx^2 / (2 a) there,
// the marginal of the 2D Gaussian), so binning by it skips no pixel the
// rasterizer composites (the cap of 3.33 sigma binds only for o > 1).
// A culled Gaussian has radii (0, 0) and every other output 0. The gradient
// is the exact derivative of these formulas (the clamp of tx, ty included, as
// gsplat's persp_proj_vjp); radii have none, culled Gaussians get 0, and
// opacities, viewmat and K get none.
#ifndef MO_KERNELS_GAUSSIAN_PROJECT_GAUSSIAN_PROJECT_H_
#define MO_KERNELS_GAUSSIAN_PROJECT_GAUSSIAN_PROJECT_H_

#include "kernels/common/gaussian_splat.h"
#include "kernels/common/platform.h"

// The largest radius written (pixels): a larger one is clamped to it before
// the conversion to int32 (it already covers every image the op takes).
#define MO_GP_MAX_RADIUS 1073741824.0f
// The largest image side (width, height).
#define MO_GP_MAX_IMAGE_SIDE 65536

namespace mo {

// Arguments of a dispatch (same layout in the shader and on the host).
struct GaussianProjectParams {
  int64 num_gaussians;  // N: means [N, 3], quats [N, 4], scales [N, 3], opacities [N]
  int32 width;
  int32 height;
  float near_plane;
  float far_plane;
  float eps2d;
  float pad;
};

// The shaders' buffer indices (gaussian_project.metal, the plans of
// gaussian_project_metal.cc), in order: the forward's inputs, its outputs and
// its GaussianProjectParams;
enum GaussianProjectBuffers {
  kGaussianProjectMeans, kGaussianProjectQuats, kGaussianProjectScales, kGaussianProjectOpacities,
  kGaussianProjectViewmat, kGaussianProjectK,
  kGaussianProjectMeans2d, kGaussianProjectConics, kGaussianProjectDepths, kGaussianProjectRadii,
  kGaussianProjectParams,
};
// the backward's upstream gradients, the forward's inputs and radii, its outputs and its GaussianProjectParams.
enum GaussianProjectGradBuffers {
  kGaussianProjectGradMeans2d, kGaussianProjectGradConics, kGaussianProjectGradDepths,
  kGaussianProjectGradMeans, kGaussianProjectGradQuats, kGaussianProjectGradScales, kGaussianProjectGradViewmat,
  kGaussianProjectGradK, kGaussianProjectGradRadii,
  kGaussianProjectGradOutMeans, kGaussianProjectGradOutQuats, kGaussianProjectGradOutScales,
  kGaussianProjectGradParams,
};

// What is wrong with a Gaussian's values (gp_bad_values), 0 when nothing is.
enum GaussianProjectBad { kGpGood = 0, kGpBadMeans = 1, kGpBadQuats = 2, kGpBadScales = 3 };

MO_FN bool gp_finite(float v) { return !isnan_f(v) && !isinf_f(v); }

// The first argument whose values for this Gaussian are refused: a mean not
// finite, a quaternion not finite or zero, a scale not finite or not positive.
MO_FN int gp_bad_values(const MO_DEVICE float* mean, const MO_DEVICE float* quat, const MO_DEVICE float* scale) {
  if (!gp_finite(mean[0]) || !gp_finite(mean[1]) || !gp_finite(mean[2])) return kGpBadMeans;
  const float qq = quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3];
  if (!gp_finite(quat[0]) || !gp_finite(quat[1]) || !gp_finite(quat[2]) || !gp_finite(quat[3]) || !(qq > 0.0f)) {
    return kGpBadQuats;
  }
  for (int k = 0; k < 3; ++k) {
    if (!(scale[k] > 0.0f) || isinf_f(scale[k])) return kGpBadScales;
  }
  return kGpGood;
}

// The camera: viewmat [4, 4] row-major (world to camera), K [3, 3].
struct GpCamera {
  float r[9];  // viewmat's rotation, row-major
  float t[3];  // its translation
  float fx, fy, cx, cy;
  float lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg;  // J's clamp of t.x / t.z, t.y / t.z
  float width, height;
};

MO_FN GpCamera gp_camera(const MO_DEVICE float* viewmat, const MO_DEVICE float* k, int width, int height) {
  GpCamera c;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) c.r[3 * i + j] = viewmat[4 * i + j];
    c.t[i] = viewmat[4 * i + 3];
  }
  c.fx = k[0];
  c.fy = k[4];
  c.cx = k[2];
  c.cy = k[5];
  c.width = float(width);
  c.height = float(height);
  const float tan_x = 0.5f * c.width / c.fx, tan_y = 0.5f * c.height / c.fy;
  c.lim_x_pos = (c.width - c.cx) / c.fx + 0.3f * tan_x;
  c.lim_x_neg = c.cx / c.fx + 0.3f * tan_x;
  c.lim_y_pos = (c.height - c.cy) / c.fy + 0.3f * tan_y;
  c.lim_y_neg = c.cy / c.fy + 0.3f * tan_y;
  return c;
}

// One Gaussian's projection, every intermediate the backward needs.
struct GpState {
  float qn[4];       // q / |q|
  float inv_norm;    // 1 / |q|
  float rq[9];       // R, row-major
  float a[9];        // A = W R diag(s)
  float tc[3];       // t, the camera-space mean
  float covc[9];     // Sigma_c = A A^T
  float j[6];        // J, row-major 2x3
  bool clip_x, clip_y;  // t.x / t.z (t.y / t.z) clamped in J
  float tx, ty;         // J's t.x, t.y (clamped)
  float cov2[3];     // Sigma' + eps2d I: (a, b, c)
  float det;
};

// The projection's state up to Sigma' (the near / far test is the caller's).
MO_FN void gp_state(MO_THREAD const GpCamera& cam, const MO_DEVICE float* mean, const MO_DEVICE float* quat,
                    const MO_DEVICE float* scale, float eps2d, MO_THREAD GpState& s) {
  const float inv = 1.0f / sqrt_f(quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3]);
  s.inv_norm = inv;
  const float w = quat[0] * inv, x = quat[1] * inv, y = quat[2] * inv, z = quat[3] * inv;
  s.qn[0] = w;
  s.qn[1] = x;
  s.qn[2] = y;
  s.qn[3] = z;
  s.rq[0] = 1.0f - 2.0f * (y * y + z * z);
  s.rq[1] = 2.0f * (x * y - w * z);
  s.rq[2] = 2.0f * (x * z + w * y);
  s.rq[3] = 2.0f * (x * y + w * z);
  s.rq[4] = 1.0f - 2.0f * (x * x + z * z);
  s.rq[5] = 2.0f * (y * z - w * x);
  s.rq[6] = 2.0f * (x * z - w * y);
  s.rq[7] = 2.0f * (y * z + w * x);
  s.rq[8] = 1.0f - 2.0f * (x * x + y * y);
  for (int i = 0; i < 3; ++i) {
    for (int col = 0; col < 3; ++col) {
      float v = 0.0f;
      for (int k = 0; k < 3; ++k) v += cam.r[3 * i + k] * s.rq[3 * k + col];
      s.a[3 * i + col] = v * scale[col];
    }
    s.tc[i] = cam.r[3 * i] * mean[0] + cam.r[3 * i + 1] * mean[1] + cam.r[3 * i + 2] * mean[2] + cam.t[i];
  }
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 3; ++k) {
      s.covc[3 * i + k] = s.a[3 * i] * s.a[3 * k] + s.a[3 * i + 1] * s.a[3 * k + 1] + s.a[3 * i + 2] * s.a[3 * k + 2];
    }
  }
  const float rz = 1.0f / s.tc[2], rz2 = rz * rz;
  const float ux = s.tc[0] * rz, uy = s.tc[1] * rz;
  s.clip_x = !(ux <= cam.lim_x_pos && ux >= -cam.lim_x_neg);
  s.clip_y = !(uy <= cam.lim_y_pos && uy >= -cam.lim_y_neg);
  const float tx = s.tc[2] * fmin_f(cam.lim_x_pos, fmax_f(-cam.lim_x_neg, ux));
  const float ty = s.tc[2] * fmin_f(cam.lim_y_pos, fmax_f(-cam.lim_y_neg, uy));
  s.tx = tx;
  s.ty = ty;
  s.j[0] = cam.fx * rz;
  s.j[1] = 0.0f;
  s.j[2] = -cam.fx * tx * rz2;
  s.j[3] = 0.0f;
  s.j[4] = cam.fy * rz;
  s.j[5] = -cam.fy * ty * rz2;
  // Sigma' = J Sigma_c J^T, (J Sigma_c) first.
  float js[6];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      js[3 * r + k] = s.j[3 * r] * s.covc[k] + s.j[3 * r + 1] * s.covc[3 + k] + s.j[3 * r + 2] * s.covc[6 + k];
    }
  }
  s.cov2[0] = js[0] * s.j[0] + js[1] * s.j[1] + js[2] * s.j[2] + eps2d;
  s.cov2[1] = js[0] * s.j[3] + js[1] * s.j[4] + js[2] * s.j[5];
  s.cov2[2] = js[3] * s.j[3] + js[4] * s.j[4] + js[5] * s.j[5] + eps2d;
  s.det = s.cov2[0] * s.cov2[2] - s.cov2[1] * s.cov2[1];
}

// Projects one Gaussian of opacity `opacity`: writes means2d[2], conic[3],
// *depth and radius[2] (x, y), or zeros when it is culled.
MO_FN void gp_project(MO_THREAD const GpCamera& cam, const MO_DEVICE float* mean, const MO_DEVICE float* quat,
                      const MO_DEVICE float* scale, float opacity, float near_plane, float far_plane, float eps2d,
                      MO_DEVICE float* mean2d, MO_DEVICE float* conic, MO_DEVICE float* depth,
                      MO_DEVICE int32* radius) {
  mean2d[0] = mean2d[1] = 0.0f;
  conic[0] = conic[1] = conic[2] = 0.0f;
  *depth = 0.0f;
  radius[0] = radius[1] = 0;
  if (!(opacity >= MO_GS_ALPHA_MIN)) return;
  GpState s;
  gp_state(cam, mean, quat, scale, eps2d, s);
  const float z = s.tc[2];
  if (!(z >= near_plane && z <= far_plane)) return;
  if (!(s.det > 0.0f)) return;
  const float extend = fmin_f(MO_GS_MAX_EXTEND, sqrt_f(2.0f * log_f(opacity / MO_GS_ALPHA_MIN)));
  const float rx = ceil_f(extend * sqrt_f(s.cov2[0])), ry = ceil_f(extend * sqrt_f(s.cov2[2]));
  if (!(rx > 0.0f && ry > 0.0f)) return;
  const float u = cam.fx * s.tc[0] / z + cam.cx, v = cam.fy * s.tc[1] / z + cam.cy;
  if (!(u + rx > 0.0f && u - rx < cam.width && v + ry > 0.0f && v - ry < cam.height)) return;
  const float inv_det = 1.0f / s.det;
  mean2d[0] = u;
  mean2d[1] = v;
  conic[0] = s.cov2[2] * inv_det;
  conic[1] = -s.cov2[1] * inv_det;
  conic[2] = s.cov2[0] * inv_det;
  *depth = z;
  radius[0] = int32(fmin_f(rx, MO_GP_MAX_RADIUS));
  radius[1] = int32(fmin_f(ry, MO_GP_MAX_RADIUS));
}

// The gradient of one Gaussian: from the upstream gradients of its mean2d
// (2), conic (3) and depth, those of its mean (3), quaternion (4) and scales
// (3); zeros when it is culled (its forward radius_x, passed as `radius`,
// is 0: both radii are 0 together).
MO_FN void gp_backward(MO_THREAD const GpCamera& cam, const MO_DEVICE float* mean, const MO_DEVICE float* quat,
                       const MO_DEVICE float* scale, int32 radius, float eps2d, const MO_DEVICE float* g_mean2d,
                       const MO_DEVICE float* g_conic, float g_depth, MO_DEVICE float* g_mean,
                       MO_DEVICE float* g_quat, MO_DEVICE float* g_scale) {
  if (radius <= 0) {
    for (int k = 0; k < 3; ++k) g_mean[k] = g_scale[k] = 0.0f;
    for (int k = 0; k < 4; ++k) g_quat[k] = 0.0f;
    return;
  }
  GpState s;
  gp_state(cam, mean, quat, scale, eps2d, s);
  const float inv_det = 1.0f / s.det;
  // P = Sigma'^-1; dL/dP splits the conic's b over P's two off-diagonal entries.
  const float p0 = s.cov2[2] * inv_det, p1 = -s.cov2[1] * inv_det, p2 = s.cov2[0] * inv_det;
  const float v0 = g_conic[0], v1 = 0.5f * g_conic[1], v2 = g_conic[2];
  // dL/dSigma' = -P (dL/dP) P (symmetric 2x2: a, b, c).
  const float pv00 = p0 * v0 + p1 * v1, pv01 = p0 * v1 + p1 * v2;
  const float pv10 = p1 * v0 + p2 * v1, pv11 = p1 * v1 + p2 * v2;
  const float vs0 = -(pv00 * p0 + pv01 * p1);
  const float vs1 = -(pv00 * p1 + pv01 * p2);
  const float vs2 = -(pv10 * p1 + pv11 * p2);
  const float vs[4] = {vs0, vs1, vs1, vs2};
  // dL/dSigma_c = J^T (dL/dSigma') J;  dL/dJ = 2 (dL/dSigma') J Sigma_c.
  float vj_s[6];  // (dL/dSigma') J
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) vj_s[3 * r + k] = vs[2 * r] * s.j[k] + vs[2 * r + 1] * s.j[3 + k];
  }
  float vcovc[9];
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 3; ++k) vcovc[3 * i + k] = s.j[i] * vj_s[k] + s.j[3 + i] * vj_s[3 + k];
  }
  float vj[6];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      vj[3 * r + k] = 2.0f * (vj_s[3 * r] * s.covc[k] + vj_s[3 * r + 1] * s.covc[3 + k] +
                              vj_s[3 * r + 2] * s.covc[6 + k]);
    }
  }
  // dL/dt: the mean2d, J and the depth.
  const float x = s.tc[0], y = s.tc[1], z = s.tc[2];
  const float rz = 1.0f / z, rz2 = rz * rz, rz3 = rz2 * rz;
  float vt0 = cam.fx * rz * g_mean2d[0];
  float vt1 = cam.fy * rz * g_mean2d[1];
  float vt2 = -(cam.fx * x * g_mean2d[0] + cam.fy * y * g_mean2d[1]) * rz2 + g_depth;
  vt2 += -cam.fx * rz2 * vj[0] - cam.fy * rz2 * vj[4];
  // J[0][2] = -fx x / z^2 (x not clamped) or -fx L / z (x = z L clamped); J[1][2] likewise.
  if (s.clip_x) {
    vt2 += cam.fx * s.tx * rz3 * vj[2];
  } else {
    vt0 += -cam.fx * rz2 * vj[2];
    vt2 += 2.0f * cam.fx * x * rz3 * vj[2];
  }
  if (s.clip_y) {
    vt2 += cam.fy * s.ty * rz3 * vj[5];
  } else {
    vt1 += -cam.fy * rz2 * vj[5];
    vt2 += 2.0f * cam.fy * y * rz3 * vj[5];
  }
  // dL/dmean = W^T dL/dt.
  for (int k = 0; k < 3; ++k) g_mean[k] = cam.r[k] * vt0 + cam.r[3 + k] * vt1 + cam.r[6 + k] * vt2;
  // Sigma_c = A A^T: dL/dA = 2 (dL/dSigma_c) A; A = W R diag(s): dL/d(R diag(s)) = W^T dL/dA.
  float va[9];
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 3; ++k) {
      va[3 * i + k] = 2.0f * (vcovc[3 * i] * s.a[k] + vcovc[3 * i + 1] * s.a[3 + k] + vcovc[3 * i + 2] * s.a[6 + k]);
    }
  }
  float vr[9];  // dL/dR
  for (int k = 0; k < 3; ++k) g_scale[k] = 0.0f;
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 3; ++k) {
      const float vm = cam.r[i] * va[k] + cam.r[3 + i] * va[3 + k] + cam.r[6 + i] * va[6 + k];
      vr[3 * i + k] = vm * scale[k];
      g_scale[k] += s.rq[3 * i + k] * vm;
    }
  }
  // dL/d(q / |q|) from R's entries, then through the normalisation.
  const float w = s.qn[0], qx = s.qn[1], qy = s.qn[2], qz = s.qn[3];
  float gn[4];
  gn[0] = 2.0f * (qx * (vr[7] - vr[5]) + qy * (vr[2] - vr[6]) + qz * (vr[3] - vr[1]));
  gn[1] = 2.0f * (-2.0f * qx * (vr[4] + vr[8]) + qy * (vr[3] + vr[1]) + qz * (vr[6] + vr[2]) + w * (vr[7] - vr[5]));
  gn[2] = 2.0f * (qx * (vr[3] + vr[1]) - 2.0f * qy * (vr[0] + vr[8]) + qz * (vr[7] + vr[5]) + w * (vr[2] - vr[6]));
  gn[3] = 2.0f * (qx * (vr[6] + vr[2]) + qy * (vr[7] + vr[5]) - 2.0f * qz * (vr[0] + vr[4]) + w * (vr[3] - vr[1]));
  const float dot = gn[0] * w + gn[1] * qx + gn[2] * qy + gn[3] * qz;
  for (int k = 0; k < 4; ++k) g_quat[k] = (gn[k] - dot * s.qn[k]) * s.inv_norm;
}

}  // namespace mo

// ---- The op's declaration (kernels/spec/op_attrs.h) --------------------------------
// MetalOpsGaussianProject(means [N, 3], quats [N, 4], scales [N, 3], opacities [N], viewmat [4, 4],
//                         intrinsics K [3, 3])
//   -> means2d [N, 2], conics [N, 3], depths [N], radii [N, 2] int32, and
// MetalOpsGaussianProjectGrad(grad_means2d, grad_conics, grad_depths, means, quats, scales, viewmat, intrinsics,
//                             radii [N, 2])
//   -> grad_means, grad_quats, grad_scales; float32.
#define MO_GAUSSIAN_PROJECT_ATTRS(ATTR)                     \
  ATTR(width, RequiredInt, 1, MO_GP_MAX_IMAGE_SIDE)         \
  ATTR(height, RequiredInt, 1, MO_GP_MAX_IMAGE_SIDE)        \
  ATTR(near_plane, Float, 0.01f, 0.0f, INFINITY)            \
  ATTR(far_plane, Float, 1e10f, 0.0f, INFINITY)             \
  ATTR(eps2d, Float, 0.3f, 0.0f, INFINITY)

#if !defined(__METAL_VERSION__) && !defined(MO_MSL_SHIM)  // host code (C++, CUDA)
#include "kernels/spec/op_attrs.h"  // host

namespace mo {
namespace gaussian_project {

// Attrs { int width, height; float near_plane, far_plane, eps2d; }, ReadAttrs, VisitAttrs.
MO_DECLARE_ATTRS("GaussianProject", MO_GAUSSIAN_PROJECT_ATTRS);

// The checks, written once for the shape functions, the TensorFlow kernels
// and the Metal glue. No TensorFlow API: sizes in, kernels/spec/checks.h's
// Result out; -1 is an unknown dimension (shape functions) and matches any
// size. Messages name the argument; tests match on them.
inline bool SameDims(const Dims& got, const Dims& want) {
  if (got.size() != want.size()) return false;
  for (size_t d = 0; d < got.size(); ++d) {
    if (got[d] != want[d] && got[d] != -1 && want[d] != -1) return false;
  }
  return true;
}

// `what` of shape `want` ([N, k] with N from means, or fixed), in op `op`.
inline Result ShapeIs(const char* op, const char* name, const char* form, const Dims& got, const Dims& want) {
  if (SameDims(got, want)) return Ok();
  return Invalid(op, ": '", name, "' must be ", form, " = ", ShapeString(want), ", got shape ", ShapeString(got));
}

// The number of Gaussians, means' first dimension (-1 unknown).
inline int64_t Count(const Dims& means) { return means.size() == 2 ? means[0] : -1; }

// MetalOpsGaussianProject's inputs (opacities: the forward's, [N]) and
// MetalOpsGaussianProjectGrad's (no opacities: nullptr).
inline Result Shapes(const Dims& means, const Dims& quats, const Dims& scales, const Dims* opacities,
                     const Dims& viewmat, const Dims& k) {
  if (means.size() != 2 || (means[1] != 3 && means[1] != -1)) {
    return Invalid("GaussianProject: 'means' must be [N, 3], got shape ", ShapeString(means));
  }
  const int64_t n = Count(means);
  MO_RETURN_IF_INVALID(ShapeIs("GaussianProject", "quats", "[N, 4]", quats, {n, 4}));
  MO_RETURN_IF_INVALID(ShapeIs("GaussianProject", "scales", "[N, 3]", scales, {n, 3}));
  if (opacities != nullptr) MO_RETURN_IF_INVALID(ShapeIs("GaussianProject", "opacities", "[N]", *opacities, {n}));
  MO_RETURN_IF_INVALID(ShapeIs("GaussianProject", "viewmat", "[4, 4]", viewmat, {4, 4}));
  if (SameDims(k, {3, 3})) return Ok();
  return Invalid("GaussianProject: 'K' (the op's input 'intrinsics') must be [3, 3], got shape ", ShapeString(k));
}

// MetalOpsGaussianProjectGrad's upstream gradients and radii, for means [N, 3].
inline Result GradShapes(const Dims& means, const Dims& grad_means2d, const Dims& grad_conics,
                         const Dims& grad_depths, const Dims& radii) {
  const int64_t n = Count(means);
  MO_RETURN_IF_INVALID(ShapeIs("GaussianProjectGrad", "grad_means2d", "[N, 2]", grad_means2d, {n, 2}));
  MO_RETURN_IF_INVALID(ShapeIs("GaussianProjectGrad", "grad_conics", "[N, 3]", grad_conics, {n, 3}));
  MO_RETURN_IF_INVALID(ShapeIs("GaussianProjectGrad", "grad_depths", "[N]", grad_depths, {n}));
  return ShapeIs("GaussianProjectGrad", "radii", "[N, 2]", radii, {n, 2});
}

// Gaussian i's values (host memory), refused as gp_bad_values says.
inline Result GaussianValues(int64_t i, const float* mean, const float* quat, const float* scale) {
  switch (gp_bad_values(mean, quat, scale)) {
    case kGpBadMeans:
      return Invalid("GaussianProject: 'means' must be finite, got means[", i, "] = (", mean[0], ", ", mean[1], ", ",
                     mean[2], ")");
    case kGpBadQuats:
      return Invalid("GaussianProject: 'quats' must be finite and nonzero (each is normalised), got quats[", i,
                     "] = (", quat[0], ", ", quat[1], ", ", quat[2], ", ", quat[3], ")");
    case kGpBadScales:
      return Invalid("GaussianProject: 'scales' must be positive and finite, got scales[", i, "] = (", scale[0], ", ",
                     scale[1], ", ", scale[2], ")");
    default:
      return Ok();
  }
}

}  // namespace gaussian_project
}  // namespace mo

#if !defined(__CUDACC__)
#include "kernels/metal_plan/plan.h"  // host

// The Metal plans (gaussian_project_metal.cc), every Metal path's
// (kernels/metal_plan/plan.h): float32, one thread per Gaussian; n > 0.
namespace mo::metal_plan {
enum GaussianProjectSlots {
  kGaussianProjectSlotMeans,
  kGaussianProjectSlotQuats,
  kGaussianProjectSlotScales,
  kGaussianProjectSlotOpacities,
  kGaussianProjectSlotViewmat,
  kGaussianProjectSlotK,
  kGaussianProjectSlotMeans2d,
  kGaussianProjectSlotConics,
  kGaussianProjectSlotDepths,
  kGaussianProjectSlotRadii,
  kGaussianProjectSlots
};
enum GaussianProjectGradSlots {
  kGaussianProjectGradSlotGradMeans2d,
  kGaussianProjectGradSlotGradConics,
  kGaussianProjectGradSlotGradDepths,
  kGaussianProjectGradSlotMeans,
  kGaussianProjectGradSlotQuats,
  kGaussianProjectGradSlotScales,
  kGaussianProjectGradSlotViewmat,
  kGaussianProjectGradSlotK,
  kGaussianProjectGradSlotRadii,
  kGaussianProjectGradSlotOutMeans,
  kGaussianProjectGradSlotOutQuats,
  kGaussianProjectGradSlotOutScales,
  kGaussianProjectGradSlots
};
Plan GaussianProjectForward(int64_t n, const gaussian_project::Attrs& a);
Plan GaussianProjectBackward(int64_t n, const gaussian_project::Attrs& a);
}  // namespace mo::metal_plan
#endif  // !__CUDACC__

#if defined(__CUDACC__) || GOOGLE_CUDA
#include <cuda_runtime.h>

// The CUDA launchers (gaussian_project.cu.cc), plain C++ (no TensorFlow): the
// TF GPU kernels (gaussian_project_cuda.cc) and the C-ABI harness
// (tests/cuda/gaussian_project_harness.cu.cc). Pointers are device memory.
namespace mo::cuda {
// *first_bad (device) = the smallest i whose values gp_bad_values refuses,
// or UINT64_MAX when none is.
cudaError_t LaunchGaussianProjectCheck(const float* means, const float* quats, const float* scales, int64_t n,
                                       unsigned long long* first_bad, cudaStream_t stream);
// The forward of n > 0 Gaussians.
cudaError_t LaunchGaussianProjectForward(const float* means, const float* quats, const float* scales,
                                         const float* opacities, const float* viewmat, const float* k, int64_t n,
                                         const gaussian_project::Attrs& a, float* means2d, float* conics,
                                         float* depths, int32_t* radii, cudaStream_t stream);
// The backward of n > 0 Gaussians (radii [n, 2]).
cudaError_t LaunchGaussianProjectBackward(const float* grad_means2d, const float* grad_conics,
                                          const float* grad_depths, const float* means, const float* quats,
                                          const float* scales, const float* viewmat, const float* k,
                                          const int32_t* radii, int64_t n, const gaussian_project::Attrs& a,
                                          float* grad_means, float* grad_quats, float* grad_scales,
                                          cudaStream_t stream);
}  // namespace mo::cuda
#endif  // __CUDACC__ || GOOGLE_CUDA

#if defined(MO_TF_KERNEL)
// The TensorFlow kernels of MetalOpsGaussianProject / MetalOpsGaussianProjectGrad,
// once for every C++-API device (one kernel class templated on the device, a
// functor per device): the checks above and the output allocation here;
// GaussianProjectFunctor<Device> does the work. gaussian_project_cpu.cc and
// gaussian_project_cuda.cc define MO_TF_KERNEL and include TensorFlow's
// op_kernel.h and kernels/framework/op_kernel_with_attrs.h before this header.
namespace mo {

// Defined per device, for n > 0 Gaussians. Forward first checks the
// Gaussians' values (GaussianValues' error for the first refused).
template <typename Device>
struct GaussianProjectFunctor {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const float* means, const float* quats,
                              const float* scales, const float* opacities, const float* viewmat, const float* k,
                              int64_t n, const gaussian_project::Attrs& a, float* means2d, float* conics,
                              float* depths, int32_t* radii);
  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const float* grad_means2d,
                               const float* grad_conics, const float* grad_depths, const float* means,
                               const float* quats, const float* scales, const float* viewmat, const float* k,
                               const int32_t* radii, int64_t n, const gaussian_project::Attrs& a, float* grad_means,
                               float* grad_quats, float* grad_scales);
};

// The forward (kGrad false) or the gradient op (kGrad true).
template <typename Device, bool kGrad>
class GaussianProjectKernel : public OpKernelWithAttrs<gaussian_project::Attrs> {
 public:
  using OpKernelWithAttrs::OpKernelWithAttrs;

  void Compute(::tensorflow::OpKernelContext* ctx) override {
    using ::tensorflow::Tensor;
    using ::tensorflow::TensorShape;
    // means, quats, scales, (opacities,) viewmat, K: inputs 0..5 of the forward, 3..7 of the gradient op.
    constexpr int kIn = kGrad ? 3 : 0, kCamera = kGrad ? 6 : 4;
    const Tensor& means = ctx->input(kIn);
    const Tensor& quats = ctx->input(kIn + 1);
    const Tensor& scales = ctx->input(kIn + 2);
    const Tensor& viewmat = ctx->input(kCamera);
    const Tensor& k = ctx->input(kCamera + 1);
    const Dims opacity_dims = kGrad ? Dims() : checks::DimsOf(ctx->input(3));
    OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_project::Shapes(
                            checks::DimsOf(means), checks::DimsOf(quats), checks::DimsOf(scales),
                            kGrad ? nullptr : &opacity_dims, checks::DimsOf(viewmat), checks::DimsOf(k))));
    const int64_t n = means.dim_size(0);
    if constexpr (kGrad) {
      const Tensor& radii = ctx->input(8);
      OP_REQUIRES_OK(ctx, checks::ToStatus(gaussian_project::GradShapes(
                              checks::DimsOf(means), checks::DimsOf(ctx->input(0)), checks::DimsOf(ctx->input(1)),
                              checks::DimsOf(ctx->input(2)), checks::DimsOf(radii))));
      Tensor *gm = nullptr, *gq = nullptr, *gs = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, means.shape(), &gm));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, quats.shape(), &gq));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, scales.shape(), &gs));
      if (n == 0) return;
      OP_REQUIRES_OK(ctx, GaussianProjectFunctor<Device>::Backward(
                              ctx, ctx->input(0).flat<float>().data(), ctx->input(1).flat<float>().data(),
                              ctx->input(2).flat<float>().data(), means.flat<float>().data(),
                              quats.flat<float>().data(), scales.flat<float>().data(), viewmat.flat<float>().data(),
                              k.flat<float>().data(), radii.flat<int32_t>().data(), n, attrs_,
                              gm->flat<float>().data(), gq->flat<float>().data(), gs->flat<float>().data()));
    } else {
      Tensor *means2d = nullptr, *conics = nullptr, *depths = nullptr, *radii = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, 2}), &means2d));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, 3}), &conics));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n}), &depths));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({n, 2}), &radii));
      if (n == 0) return;
      OP_REQUIRES_OK(ctx, GaussianProjectFunctor<Device>::Forward(
                              ctx, means.flat<float>().data(), quats.flat<float>().data(),
                              scales.flat<float>().data(), ctx->input(3).flat<float>().data(),
                              viewmat.flat<float>().data(), k.flat<float>().data(), n,
                              attrs_, means2d->flat<float>().data(), conics->flat<float>().data(),
                              depths->flat<float>().data(), radii->flat<int32_t>().data()));
    }
  }
};

}  // namespace mo

// Both ops on DEVICE (DEVICE_CPU, DEVICE_GPU), run by the kernel class above
// on DEVICE_TYPE (gaussian_project_cpu.cc, gaussian_project_cuda.cc).
#define MO_REGISTER_GAUSSIAN_PROJECT(DEVICE, DEVICE_TYPE)                                      \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianProject").Device(::tensorflow::DEVICE),     \
                          ::mo::GaussianProjectKernel<DEVICE_TYPE, false>);                 \
  REGISTER_KERNEL_BUILDER(Name("MetalOpsGaussianProjectGrad").Device(::tensorflow::DEVICE), \
                          ::mo::GaussianProjectKernel<DEVICE_TYPE, true>)
#endif  // MO_TF_KERNEL
#endif  // host code

#endif  // MO_KERNELS_GAUSSIAN_PROJECT_GAUSSIAN_PROJECT_H_
