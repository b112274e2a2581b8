// GaussianProject Metal shaders: one thread per Gaussian (grid-stride),
// float32 (T = float). The projection and its gradient are
// kernels/gaussian_project/gaussian_project.h. Entry points:
//   gaussian_project_forward   means, quats, scales, opacities, viewmat, K -> means2d, conics, depths,
//                              radii [N, 2]
//   gaussian_project_backward  grad_means2d, grad_conics, grad_depths, means, quats, scales,
//                              viewmat, K, radii -> grad_means, grad_quats, grad_scales
#include "kernels/gaussian_project/gaussian_project.h"

template <typename T>
[[kernel]] void gaussian_project_forward(
    device const T* means [[buffer(mo::kGaussianProjectMeans)]],
    device const T* quats [[buffer(mo::kGaussianProjectQuats)]],
    device const T* scales [[buffer(mo::kGaussianProjectScales)]],
    device const T* opacities [[buffer(mo::kGaussianProjectOpacities)]],
    device const T* viewmat [[buffer(mo::kGaussianProjectViewmat)]],
    device const T* k [[buffer(mo::kGaussianProjectK)]],
    device T* means2d [[buffer(mo::kGaussianProjectMeans2d)]],
    device T* conics [[buffer(mo::kGaussianProjectConics)]],
    device T* depths [[buffer(mo::kGaussianProjectDepths)]],
    device int* radii [[buffer(mo::kGaussianProjectRadii)]],
    constant mo::GaussianProjectParams& p [[buffer(mo::kGaussianProjectParams)]],
    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  const mo::GpCamera cam = mo::gp_camera(viewmat, k, p.width, p.height);
  for (mo::int64 i = gid; i < p.num_gaussians; i += grid_size) {
    mo::gp_project(cam, means + 3 * i, quats + 4 * i, scales + 3 * i, opacities[i], p.near_plane, p.far_plane, p.eps2d,
                   means2d + 2 * i, conics + 3 * i, depths + i, radii + 2 * i);
  }
}

template <typename T>
[[kernel]] void gaussian_project_backward(
    device const T* grad_means2d [[buffer(mo::kGaussianProjectGradMeans2d)]],
    device const T* grad_conics [[buffer(mo::kGaussianProjectGradConics)]],
    device const T* grad_depths [[buffer(mo::kGaussianProjectGradDepths)]],
    device const T* means [[buffer(mo::kGaussianProjectGradMeans)]],
    device const T* quats [[buffer(mo::kGaussianProjectGradQuats)]],
    device const T* scales [[buffer(mo::kGaussianProjectGradScales)]],
    device const T* viewmat [[buffer(mo::kGaussianProjectGradViewmat)]],
    device const T* k [[buffer(mo::kGaussianProjectGradK)]],
    device const int* radii [[buffer(mo::kGaussianProjectGradRadii)]],
    device T* grad_means [[buffer(mo::kGaussianProjectGradOutMeans)]],
    device T* grad_quats [[buffer(mo::kGaussianProjectGradOutQuats)]],
    device T* grad_scales [[buffer(mo::kGaussianProjectGradOutScales)]],
    constant mo::GaussianProjectParams& p [[buffer(mo::kGaussianProjectGradParams)]],
    uint gid [[thread_position_in_grid]], uint grid_size [[threads_per_grid]]) {
  const mo::GpCamera cam = mo::gp_camera(viewmat, k, p.width, p.height);
  for (mo::int64 i = gid; i < p.num_gaussians; i += grid_size) {
    mo::gp_backward(cam, means + 3 * i, quats + 4 * i, scales + 3 * i, radii[2 * i], p.eps2d, grad_means2d + 2 * i,
                    grad_conics + 3 * i, grad_depths[i], grad_means + 3 * i, grad_quats + 4 * i, grad_scales + 3 * i);
  }
}

// The host names gaussian_project_metal.cc's plans ask for (float32 only).
template [[host_name("gaussian_project_forward")]] [[kernel]] decltype(gaussian_project_forward<float>) gaussian_project_forward<float>;
template [[host_name("gaussian_project_backward")]] [[kernel]] decltype(gaussian_project_backward<float>) gaussian_project_backward<float>;
