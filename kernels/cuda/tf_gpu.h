// The glue every TF GPU registration (kernels/*/*_gpu.cc, CUDA builds of
// TensorFlow only) shares, written once: TF element types as the CUDA types of
// the same layout that the launchers take, the op's CUDA stream, a CUDA error
// as a TF status, and the one synchronous read-back the checks need. The
// launchers and the harness never include this (no TensorFlow there).
#ifndef MO_KERNELS_CUDA_TF_GPU_H_
#define MO_KERNELS_CUDA_TF_GPU_H_

#ifndef EIGEN_USE_GPU
#error "define EIGEN_USE_GPU before the first include (Eigen::GpuDevice)"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/cublas_gemm.h"  // GpuStatus
#include "tensorflow/core/framework/numeric_types.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/errors.h"

namespace mo {

using GPUDevice = Eigen::GpuDevice;

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

// The stream TensorFlow runs the op's GPU work on.
inline cudaStream_t Stream(::tensorflow::OpKernelContext* ctx) { return ctx->eigen_device<GPUDevice>().stream(); }
// An XLA call's stream, as it is (functors that TensorFlow's kernels and XLA's
// handlers share take either: kernels/xla/pointwise_xla.h).
inline cudaStream_t Stream(cudaStream_t stream) { return stream; }

// OK, or Internal("<what> failed: <CUDA's message>").
inline absl::Status CudaStatus(const char* what, cudaError_t err) {
  return err == cudaSuccess ? absl::OkStatus()
                            : ::tensorflow::errors::Internal(what, " failed: ", cudaGetErrorString(err));
}

// OK, or Internal("<op> on the GPU: <call> failed: <its library's message>"):
// a launcher that queues CUDA and cuBLAS calls.
inline absl::Status GpuStatusOf(const char* op, const GpuStatus& s) {
  return s.ok() ? absl::OkStatus() : ::tensorflow::errors::Internal(op, " on the GPU: ", s.what, " failed: ", s.error);
}

// OK, or Internal("<what> CUDA launch failed: <CUDA's message>").
inline absl::Status LaunchStatus(const char* what, cudaError_t err) {
  return err == cudaSuccess ? absl::OkStatus()
                            : ::tensorflow::errors::Internal(what, " CUDA launch failed: ", cudaGetErrorString(err));
}

// Copies `bytes` of device memory to the host once the work queued on `stream`
// has run, and waits for it (the checks that read a bad element's position
// back: one synchronisation of the stream).
inline cudaError_t CopyToHost(void* host, const void* device, size_t bytes, cudaStream_t stream) {
  cudaError_t err = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err;
}

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_TF_GPU_H_
