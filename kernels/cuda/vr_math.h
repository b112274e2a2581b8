// The math policies of kernels/common/volume_render.h for CUDA: VrFloatMath
// for float, CUDA's exp / expm1 for double (the shared header has no double).
// Used by the VolumeRender and PackedVolumeRender kernels.
#ifndef METAL_OPS_KERNELS_CUDA_VR_MATH_H_
#define METAL_OPS_KERNELS_CUDA_VR_MATH_H_

#include "kernels/common/volume_render.h"

namespace mo {
namespace cuda {

struct VrDoubleMath {
  static __host__ __device__ __forceinline__ double exp(double x) { return ::exp(x); }
  static __host__ __device__ __forceinline__ double expm1(double x) { return ::expm1(x); }
};

template <typename T> struct VrMathFor;
template <> struct VrMathFor<float> { typedef VrFloatMath type; };
template <> struct VrMathFor<double> { typedef VrDoubleMath type; };

}  // namespace cuda
}  // namespace mo

#endif  // METAL_OPS_KERNELS_CUDA_VR_MATH_H_
