// The C-ABI harnesses' error reporting, written once: an entry point returns
// a code and keeps the message of the calling thread's last failure, which
// its metal_ops_<op>_last_error() returns. Internal linkage on purpose: each
// harness source keeps its own message.
#ifndef MO_KERNELS_CUDA_LAST_ERROR_H_
#define MO_KERNELS_CUDA_LAST_ERROR_H_

#include <string>

#include "kernels/cuda/cublas_gemm.h"  // GpuStatus

namespace {  // NOLINT(build/namespaces): one copy per harness source

thread_local std::string last_error;

inline int Fail(int code, const std::string& message) {
  last_error = message;
  return code;
}

// 0 for success, else `code` with "<call> failed: <message>" kept.
inline int StatusCode(const mo::cuda::GpuStatus& s, int code) {
  return s.ok() ? 0 : Fail(code, std::string(s.what) + " failed: " + s.error);
}

}  // namespace

#endif  // MO_KERNELS_CUDA_LAST_ERROR_H_
