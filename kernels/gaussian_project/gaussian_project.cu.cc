// GaussianProject's CUDA kernels and their launchers (declared in
// gaussian_project.h): one thread per Gaussian (grid-stride, 64-bit
// indices), each reading the camera (viewmat, K) itself. The projection and
// its gradient are kernels/gaussian_project/gaussian_project.h's.
#include "kernels/gaussian_project/gaussian_project.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

__global__ void GaussianProjectCheckKernel(const float* __restrict__ means, const float* __restrict__ quats,
                                           const float* __restrict__ scales, int64_t n,
                                           unsigned long long* first_bad) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    if (gp_bad_values(means + 3 * i, quats + 4 * i, scales + 3 * i) != kGpGood) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

__global__ void GaussianProjectForwardKernel(const float* __restrict__ means, const float* __restrict__ quats,
                                             const float* __restrict__ scales, const float* __restrict__ opacities,
                                             const float* __restrict__ viewmat, const float* __restrict__ k,
                                             int64_t n, gaussian_project::Attrs a,
                                             float* __restrict__ means2d, float* __restrict__ conics,
                                             float* __restrict__ depths, int32_t* __restrict__ radii) {
  const GpCamera cam = gp_camera(viewmat, k, a.width, a.height);
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    gp_project(cam, means + 3 * i, quats + 4 * i, scales + 3 * i, opacities[i], a.near_plane, a.far_plane, a.eps2d,
               means2d + 2 * i, conics + 3 * i, depths + i, radii + 2 * i);
  }
}

__global__ void GaussianProjectBackwardKernel(const float* __restrict__ grad_means2d,
                                              const float* __restrict__ grad_conics,
                                              const float* __restrict__ grad_depths, const float* __restrict__ means,
                                              const float* __restrict__ quats, const float* __restrict__ scales,
                                              const float* __restrict__ viewmat, const float* __restrict__ k,
                                              const int32_t* __restrict__ radii, int64_t n,
                                              gaussian_project::Attrs a, float* __restrict__ grad_means,
                                              float* __restrict__ grad_quats, float* __restrict__ grad_scales) {
  const GpCamera cam = gp_camera(viewmat, k, a.width, a.height);
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    gp_backward(cam, means + 3 * i, quats + 4 * i, scales + 3 * i, radii[2 * i], a.eps2d, grad_means2d + 2 * i,
                grad_conics + 3 * i, grad_depths[i], grad_means + 3 * i, grad_quats + 4 * i, grad_scales + 3 * i);
  }
}

}  // namespace

cudaError_t LaunchGaussianProjectCheck(const float* means, const float* quats, const float* scales, int64_t n,
                                       unsigned long long* first_bad, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream);
  if (err != cudaSuccess || n == 0) return err;
  GaussianProjectCheckKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(means, quats, scales, n,
                                                                                   first_bad);
  return cudaGetLastError();
}

cudaError_t LaunchGaussianProjectForward(const float* means, const float* quats, const float* scales,
                                         const float* opacities, const float* viewmat, const float* k, int64_t n,
                                         const gaussian_project::Attrs& a, float* means2d, float* conics,
                                         float* depths, int32_t* radii, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GaussianProjectForwardKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(
      means, quats, scales, opacities, viewmat, k, n, a, means2d, conics, depths, radii);
  return cudaGetLastError();
}

cudaError_t LaunchGaussianProjectBackward(const float* grad_means2d, const float* grad_conics,
                                          const float* grad_depths, const float* means, const float* quats,
                                          const float* scales, const float* viewmat, const float* k,
                                          const int32_t* radii, int64_t n, const gaussian_project::Attrs& a,
                                          float* grad_means, float* grad_quats, float* grad_scales,
                                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GaussianProjectBackwardKernel<<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(
      grad_means2d, grad_conics, grad_depths, means, quats, scales, viewmat, k, radii, n, a, grad_means, grad_quats,
      grad_scales);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mo
