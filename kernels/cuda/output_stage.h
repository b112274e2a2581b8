// Elementwise stages around a GEMM, shared by the layer-by-layer CUDA paths
// (FusedConv2D, FusedMLP's float32 layers): act(acc + bias + residual) after a
// product, and gradients * act'(.) before one. Plain C++ declarations (no
// TensorFlow); the formulas are kernels/common/activations.h's.
#ifndef MO_KERNELS_CUDA_OUTPUT_STAGE_H_
#define MO_KERNELS_CUDA_OUTPUT_STAGE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace mo {
namespace cuda {

// V consecutive floats, loaded and stored as one access (aligned to its size).
template <int V>
struct alignas(sizeof(float) * V) Floats {
  float v[V];
};

// The widest access of V = 4, 2 or 1 floats that every pointer's alignment and
// the element count `multiple_of` allow (null pointers do not count).
inline int VectorWidth(int64_t multiple_of, std::initializer_list<const void*> pointers) {
  for (int v : {4, 2}) {
    bool ok = multiple_of % v == 0;
    for (const void* p : pointers) ok = ok && reinterpret_cast<uintptr_t>(p) % (sizeof(float) * v) == 0;
    if (ok) return v;
  }
  return 1;
}

// out = act(out + bias + residual) over a row-major [rows, channels] block,
// queued on `stream`; bias ([channels]) and residual (out's shape) may be
// null. Nothing is launched without bias, residual and activation.
cudaError_t LaunchOutputStage(float* out, const float* bias, const float* residual, int64_t rows, int64_t channels,
                              int act, float alpha, cudaStream_t stream);

// backprops[i] = gradients[i] * act'(z[i]), the derivative taken from
// features (z) when given, else from outputs (y = act(z)): exact for the
// activations whose derivative follows from their output (the ops' attribute
// checks decide). backprops may be gradients.
cudaError_t LaunchFusedActivationGrad(const float* gradients, const float* outputs, const float* features,
                                      float* backprops, int64_t n, int act, float alpha, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_OUTPUT_STAGE_H_
