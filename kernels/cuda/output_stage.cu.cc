// The elementwise stages of kernels/cuda/output_stage.h.
#include "kernels/cuda/output_stage.h"

#include "kernels/common/activations.h"
#include "kernels/cuda/cuda_launch.h"

namespace mo {
namespace cuda {
namespace {

// out = act(out + bias + residual) over a [rows, channels] block, V floats per
// access (channels % V == 0).
template <int V>
__global__ void OutputStageKernel(Floats<V>* out, const Floats<V>* __restrict__ bias,
                                  const Floats<V>* __restrict__ residual, int64_t n, int64_t channels_v, int act,
                                  float alpha) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    Floats<V> o = out[i];
    Floats<V> b{}, r{};  // zeros unless given
    if (bias != nullptr) b = bias[i % channels_v];
    if (residual != nullptr) r = residual[i];
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = fused_output_element(o.v[k], b.v[k], r.v[k], act, alpha);
    out[i] = o;
  }
}

// gradients and backprops may be one buffer: element i is read before it is written.
template <int V>
__global__ void ActivationGradKernel(const Floats<V>* gradients, const Floats<V>* __restrict__ outputs,
                                     const Floats<V>* __restrict__ features, Floats<V>* backprops, int64_t n,
                                     int act, float alpha) {
  for (int64_t i = GlobalThreadIndex(); i < n; i += GlobalThreadCount()) {
    Floats<V> d = gradients[i];
    if (features != nullptr) {
      const Floats<V> z = features[i];
#pragma unroll
      for (int k = 0; k < V; ++k) d.v[k] *= activation_derivative_from_input(z.v[k], act, alpha);
    } else {
      const Floats<V> y = outputs[i];
#pragma unroll
      for (int k = 0; k < V; ++k) d.v[k] *= activation_derivative_from_output(y.v[k], act, alpha);
    }
    backprops[i] = d;
  }
}

template <int V>
cudaError_t OutputStageV(float* out, const float* bias, const float* residual, int64_t rows, int64_t channels,
                         int act, float alpha, cudaStream_t stream) {
  const int64_t n = rows * channels / V;
  OutputStageKernel<V><<<GridStrideBlocks(n), kThreadsPerBlock, 0, stream>>>(
      reinterpret_cast<Floats<V>*>(out), reinterpret_cast<const Floats<V>*>(bias),
      reinterpret_cast<const Floats<V>*>(residual), n, channels / V, act, alpha);
  return cudaGetLastError();
}

template <int V>
cudaError_t ActivationGradV(const float* gradients, const float* outputs, const float* features, float* backprops,
                            int64_t n, int act, float alpha, cudaStream_t stream) {
  ActivationGradKernel<V><<<GridStrideBlocks(n / V), kThreadsPerBlock, 0, stream>>>(
      reinterpret_cast<const Floats<V>*>(gradients), reinterpret_cast<const Floats<V>*>(outputs),
      reinterpret_cast<const Floats<V>*>(features), reinterpret_cast<Floats<V>*>(backprops), n / V, act, alpha);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchOutputStage(float* out, const float* bias, const float* residual, int64_t rows, int64_t channels,
                              int act, float alpha, cudaStream_t stream) {
  if (bias == nullptr && residual == nullptr && act == kActNone) return cudaSuccess;
  switch (VectorWidth(channels, {out, bias, residual})) {
    case 4:
      return OutputStageV<4>(out, bias, residual, rows, channels, act, alpha, stream);
    case 2:
      return OutputStageV<2>(out, bias, residual, rows, channels, act, alpha, stream);
    default:
      return OutputStageV<1>(out, bias, residual, rows, channels, act, alpha, stream);
  }
}

cudaError_t LaunchFusedActivationGrad(const float* gradients, const float* outputs, const float* features,
                                      float* backprops, int64_t n, int act, float alpha, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (VectorWidth(n, {gradients, outputs, features, backprops}) == 4) {
    return ActivationGradV<4>(gradients, outputs, features, backprops, n, act, alpha, stream);
  }
  return ActivationGradV<1>(gradients, outputs, features, backprops, n, act, alpha, stream);
}

}  // namespace cuda
}  // namespace mo
