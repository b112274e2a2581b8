// The arguments of the two renderers' device code, VolumeRender and
// PackedVolumeRender, as every backend's per-ray drivers take them
// (kernels/volume_render/volume_render.h, packed_volume_render.h): filled by their
// kernel classes (the MO_TF_KERNEL sections of the same headers)
// and the CUDA harness for the CPU functors and the CUDA kernels (by value),
// and inside each Metal shader from its buffers (Metal binds buffers, not
// structs of pointers). No TensorFlow; plain C++, CUDA and MSL (platform.h).
#ifndef MO_KERNELS_COMMON_RENDER_ARGS_H_
#define MO_KERNELS_COMMON_RENDER_ARGS_H_

#include "kernels/common/platform.h"

namespace mo {

// The arguments both renderers' kernels take: the sizes (samples: S per ray,
// or N packed), the attributes and the inputs both have.
template <typename T>
struct RenderArgs {
  int64 rays, samples;
  bool background_per_ray;
  float early_termination;
  const MO_DEVICE T *sigma, *rgb, *background;
  // The `validate` attribute: whether the host raises for the first invalid
  // ray (the device code checks every ray either way; an invalid one renders
  // NaN). Without it a CUDA launch reads nothing back.
  bool validate = true;
};

// The forward's outputs.
template <typename T>
struct RenderOutputs {
  MO_DEVICE T *out_rgb, *depth, *opacity;
  MO_DEVICE T* weights;  // nullptr when the weights output is empty
};

// The backward's other inputs (the forward's outputs and their gradients)
// and its outputs.
template <typename T>
struct RenderGrads {
  const MO_DEVICE T *out_rgb, *depth, *opacity;
  const MO_DEVICE T* weights;  // nullptr (with grad_weights) when the forward returned no weights
  const MO_DEVICE T *grad_rgb, *grad_depth, *grad_opacity;
  const MO_DEVICE T* grad_weights;
  MO_DEVICE T *grad_sigma, *grad_samples_rgb, *grad_background;
};

// VolumeRender's sample intervals: t [R, S + 1].
template <typename T>
struct VolumeRenderIntervals {
  const MO_DEVICE T* t;
};

template <typename T>
struct VolumeRenderForwardArgs : RenderArgs<T>, VolumeRenderIntervals<T>, RenderOutputs<T> {};

template <typename T>
struct VolumeRenderBackwardArgs : RenderArgs<T>, VolumeRenderIntervals<T>, RenderGrads<T> {};

// The packed samples' intervals and layout: t_starts / t_ends [N], ray r
// owning [offsets[r], offsets[r] + counts[r]).
template <typename T>
struct PackedSamples {
  const MO_DEVICE T *t_starts, *t_ends;
  const MO_DEVICE int32 *offsets, *counts;
};

// VolumeRender's arguments over packed samples.
template <typename T>
struct PackedVolumeRenderForwardArgs : RenderArgs<T>, PackedSamples<T>, RenderOutputs<T> {};

template <typename T>
struct PackedVolumeRenderBackwardArgs : RenderArgs<T>, PackedSamples<T>, RenderGrads<T> {};

}  // namespace mo

#endif  // MO_KERNELS_COMMON_RENDER_ARGS_H_
