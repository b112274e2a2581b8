// What the Gaussian-splatting ops share: the alpha below which the
// rasterizer skips a Gaussian at a pixel, which is also the opacity below
// which the projection culls a Gaussian and from which it sizes the box of
// pixels the Gaussian reaches, and that box's largest extent in standard
// deviations. No TensorFlow; plain C++, CUDA and MSL.
#ifndef MO_KERNELS_COMMON_GAUSSIAN_SPLAT_H_
#define MO_KERNELS_COMMON_GAUSSIAN_SPLAT_H_

#define MO_GS_ALPHA_MIN (1.0f / 255.0f)  // a Gaussian below this alpha is skipped
#define MO_GS_MAX_EXTEND 3.33f           // a projected box reaches at most this many sigma

#endif  // MO_KERNELS_COMMON_GAUSSIAN_SPLAT_H_
