// A row-major float32 GEMM on a CUDA stream through cuBLAS, for the CUDA
// launchers (kernels/fused_conv2d/fused_conv2d.cu.cc, fused_mlp_layers.cu.cc): plain C++, no TensorFlow and no
// cuBLAS header here, so the TF glue and the C-ABI harness include it as is.
//
// cuBLAS is opened at run time, on first use (dlopen of the soname of the
// cuBLAS headers the library was compiled with, libcublas.so.12 for the
// pinned nvidia-cublas-cu12): inside TensorFlow's CUDA build that is the
// cuBLAS TensorFlow has already loaded; the library itself then needs only
// the NVIDIA driver to load (tools/check/cuda_lib_check.py), and a process without
// cuBLAS gets an error from the op that needs it instead of no GPU kernels.
#ifndef MO_KERNELS_CUDA_CUBLAS_GEMM_H_
#define MO_KERNELS_CUDA_CUBLAS_GEMM_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// The outcome of a sequence of CUDA / cuBLAS calls: `what` names the call that
// failed (nullptr: all succeeded), `error` is its library's message. Both
// point at static strings.
struct GpuStatus {
  const char* what = nullptr;
  const char* error = nullptr;
  bool ok() const { return what == nullptr; }
};

inline GpuStatus CudaCall(const char* what, cudaError_t err) {
  return err == cudaSuccess ? GpuStatus{} : GpuStatus{what, cudaGetErrorString(err)};
}

// The soname this build opens ("libcublas.so.12").
const char* CublasSoname();

// C[m, n] = op(A)[m, k] op(B)[k, n], row-major with leading dimensions lda,
// ldb, ldc (in floats), queued on `stream` of the current device. op(A) is A
// as stored ([m, k]) or, with trans_a, the transpose of the stored [k, m]
// matrix; likewise op(B). allow_tf32: cuBLAS may use TF32 tensor cores
// (10-bit mantissa products, float32 accumulation); otherwise the products are
// float32. m, n, k, lda, ldb and ldc must fit an int (cuBLAS's classic
// interface); k == 0 is not allowed (C would be left as it was). Thread-safe:
// each call takes a cuBLAS handle of its own device and stream from a pool,
// so no handle is ever used by two threads at once or by two streams.
GpuStatus RowMajorSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                        const float* b, int64_t ldb, float* c, int64_t ldc, bool allow_tf32, cudaStream_t stream);

// C = A B, neither transposed.
inline GpuStatus RowMajorSgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                               int64_t ldb, float* c, int64_t ldc, bool allow_tf32, cudaStream_t stream) {
  return RowMajorSgemm(false, false, m, n, k, a, lda, b, ldb, c, ldc, allow_tf32, stream);
}

// C[m, n] = act(A[m, k] B[k, n] + bias[n]) (row-major, neither transposed;
// act: ReLU when `relu`, else none) in one cuBLASLt matmul whose epilogue adds
// the bias and applies the activation: no separate pass over C. *done is false,
// with nothing queued, where cuBLASLt (libcublasLt.so of the same major
// version) is missing or offers no algorithm for the shape: the caller then
// runs RowMajorSgemm and its own pass. Errors of a matmul that was queued are
// returned. Same handles, TF32 rule and int limits as RowMajorSgemm.
GpuStatus RowMajorSgemmEpilogue(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                int64_t ldb, const float* bias, bool relu, float* c, int64_t ldc, bool allow_tf32,
                                cudaStream_t stream, bool* done);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_CUBLAS_GEMM_H_
