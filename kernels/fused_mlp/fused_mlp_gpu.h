// What the CUDA paths of FusedMLP that TensorFlow runs share (the GPU kernel,
// kernels/fused_mlp/fused_mlp_gpu.cc, and the XLA CUDA handler,
// kernels/fused_mlp/fused_mlp_xla_gpu.cc): the launch shape of a network, and
// whether float32 runs on TF32 tensor cores (TensorFlow's TF32 setting, and
// NVIDIA_TF32_OVERRIDE=0 as cuBLAS reads it).
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_GPU_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_GPU_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/fused_mlp/fused_mlp_cuda.h"
#include "kernels/fused_mlp/fused_mlp_spec.h"
#include "tsl/platform/tensor_float_32_utils.h"

namespace mo {
namespace cuda {

inline FusedMlpShape ShapeOf(const fused_mlp::Net& net, int64_t n, const fused_mlp::Attrs& a) {
  return FusedMlpShape{n, static_cast<int>(net.in_dim), static_cast<int>(net.width), net.hidden_layers,
                       static_cast<int>(net.out_dim), a.activation, a.output_activation, a.leaky_relu_alpha};
}

// float32 on TF32 tensor cores when TensorFlow allows TF32 for its own
// float32 products (tf.config.experimental.enable_tensor_float_32_execution,
// on by default) and NVIDIA's process-wide override does not forbid it
// (NVIDIA_TF32_OVERRIDE=0 turns TF32 off in cuBLAS and cuDNN; the tests set it
// to compare with TensorFlow's float32). Read at every launch: both can change
// while the process runs.
template <typename T>
bool UseTf32() {
  if (!std::is_same<T, float>::value || !tsl::tensor_float_32_execution_enabled()) return false;
  const char* env = std::getenv("NVIDIA_TF32_OVERRIDE");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_GPU_H_
