// What the TF GPU registrations (kernels/cuda/*_gpu.cc, CUDA builds of
// TensorFlow only) share: TF element types as the CUDA types of the same
// layout that the launchers take, and a launcher's error as a TF status. The
// launchers and the harness never include this (no TensorFlow there).
#ifndef METAL_OPS_KERNELS_CUDA_TF_GPU_H_
#define METAL_OPS_KERNELS_CUDA_TF_GPU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "tensorflow/core/framework/numeric_types.h"
#include "tensorflow/core/platform/errors.h"

namespace mo {
namespace cuda {

template <typename T> struct CudaType { using type = T; };
template <> struct CudaType<Eigen::half> { using type = __half; };
template <> struct CudaType<::tensorflow::bfloat16> { using type = __nv_bfloat16; };
static_assert(sizeof(Eigen::half) == sizeof(__half), "half layouts differ");
static_assert(sizeof(::tensorflow::bfloat16) == sizeof(__nv_bfloat16), "bfloat16 layouts differ");

template <typename T>
const typename CudaType<T>::type* AsCuda(const T* p) {
  return reinterpret_cast<const typename CudaType<T>::type*>(p);
}
template <typename T>
typename CudaType<T>::type* AsCuda(T* p) {
  return reinterpret_cast<typename CudaType<T>::type*>(p);
}

// OK, or Internal("<what> CUDA launch failed: <CUDA's message>").
inline absl::Status LaunchStatus(const char* what, cudaError_t err) {
  return err == cudaSuccess ? absl::OkStatus()
                            : ::tensorflow::errors::Internal(what, " CUDA launch failed: ", cudaGetErrorString(err));
}

}  // namespace cuda
}  // namespace mo

#endif  // METAL_OPS_KERNELS_CUDA_TF_GPU_H_
