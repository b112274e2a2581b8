// C-ABI entry points for testing the GaussianRasterize CUDA kernels without TensorFlow
// (tests/cuda/test_gaussian_rasterize_cuda.py drives them with CuPy device pointers);
// the launchers are declared in kernels/gaussian_rasterize/gaussian_rasterize.h.
#include "kernels/gaussian_rasterize/gaussian_rasterize.h"

extern "C" {

int metal_ops_gaussian_rasterize_forward(const float* means2d, const float* conics, const float* colors,
                                         const float* opacities, const float* background, const int32_t* ids,
                                         const int32_t* ranges, int64_t n, int64_t channels, int64_t m, int width,
                                         int height, int tile_size, float* image, float* alpha, int32_t* last_ids,
                                         cudaStream_t stream) {
  const mo::gaussian_rasterize::ForwardArgs t{means2d, conics, colors, opacities, background, ids, ranges,
                                               image, alpha, last_ids};
  return static_cast<int>(mo::cuda::LaunchGaussianRasterizeForward(
      t, mo::gaussian_rasterize::Sizes{n, channels, m}, mo::gaussian_rasterize::Attrs{width, height, tile_size},
      stream));
}

int metal_ops_gaussian_rasterize_backward(const float* means2d, const float* conics, const float* colors,
                                          const float* opacities, const float* background, const int32_t* ids,
                                          const int32_t* ranges, const float* alpha, const int32_t* last_ids,
                                          const float* grad_image, const float* grad_alpha, int64_t n,
                                          int64_t channels, int64_t m, int width, int height, int tile_size,
                                          float* grad_means2d, float* grad_conics, float* grad_colors,
                                          float* grad_opacities, float* grad_background, cudaStream_t stream) {
  const mo::gaussian_rasterize::BackwardArgs t{means2d,    conics,       colors,      opacities,      background,
                                                ids,        ranges,       alpha,       last_ids,       grad_image,
                                                grad_alpha, grad_means2d, grad_conics, grad_colors,    grad_opacities,
                                                grad_background};
  return static_cast<int>(mo::cuda::LaunchGaussianRasterizeBackward(
      t, mo::gaussian_rasterize::Sizes{n, channels, m}, mo::gaussian_rasterize::Attrs{width, height, tile_size},
      stream));
}

}  // extern "C"
