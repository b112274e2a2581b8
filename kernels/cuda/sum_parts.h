// The fixed-order sum of partial results, shared by the CUDA launchers whose
// reductions run per block or per group into a workspace and must stay bitwise
// deterministic (no atomics): HashEncode's dx groups, FusedMLP's TF32 ReLU
// backward's db blocks. Plain C++ declaration (no TensorFlow).
#ifndef MO_KERNELS_CUDA_SUM_PARTS_H_
#define MO_KERNELS_CUDA_SUM_PARTS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// out[j] = parts[j] + parts[n + j] + ... + parts[(count - 1) n + j], summed in
// that order, for j < n; queued on `stream`. count >= 1.
cudaError_t LaunchSumParts(const float* parts, int count, int64_t n, float* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_CUDA_SUM_PARTS_H_
