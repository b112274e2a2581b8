// C-ABI entry points for testing the GaussianProject CUDA kernels without
// TensorFlow (tests/cuda/test_gaussian_project_cuda.py drives them with CuPy
// device pointers); the launchers are declared in
// kernels/gaussian_project/gaussian_project.h.
#include "kernels/gaussian_project/gaussian_project.h"

extern "C" {

int metal_ops_gaussian_project_check(const float* means, const float* quats, const float* scales, int64_t n,
                                     unsigned long long* first_bad, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchGaussianProjectCheck(means, quats, scales, n, first_bad, stream));
}

int metal_ops_gaussian_project_forward(const float* means, const float* quats, const float* scales,
                                       const float* opacities, const float* viewmat, const float* k, int64_t n,
                                       int width, int height,
                                       float near_plane, float far_plane, float eps2d, float* means2d, float* conics,
                                       float* depths, int32_t* radii, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchGaussianProjectForward(
      means, quats, scales, opacities, viewmat, k, n,
      mo::gaussian_project::Attrs{width, height, near_plane, far_plane, eps2d}, means2d,
      conics, depths, radii, stream));
}

int metal_ops_gaussian_project_backward(const float* grad_means2d, const float* grad_conics,
                                        const float* grad_depths, const float* means, const float* quats,
                                        const float* scales, const float* viewmat, const float* k,
                                        const int32_t* radii, int64_t n, int width, int height, float near_plane,
                                        float far_plane, float eps2d, float* grad_means, float* grad_quats,
                                        float* grad_scales, cudaStream_t stream) {
  return static_cast<int>(mo::cuda::LaunchGaussianProjectBackward(
      grad_means2d, grad_conics, grad_depths, means, quats, scales, viewmat, k, radii, n,
      mo::gaussian_project::Attrs{width, height, near_plane, far_plane, eps2d}, grad_means, grad_quats, grad_scales, stream));
}

}  // extern "C"
