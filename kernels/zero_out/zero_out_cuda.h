// ZeroOut CUDA launcher: plain C++ declarations, no TensorFlow, no CUDA types
// beyond the stream, so both the TF GPU kernel and the harness can call it.
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_CUDA_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace mo {
namespace cuda {

// Writes zero_out_element(in[i], i, preserve_index) to out[i] for i < n.
template <typename T>
cudaError_t LaunchZeroOut(const T* in, T* out, int64_t n, int64_t preserve_index,
                          cudaStream_t stream);

}  // namespace cuda
}  // namespace mo

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_CUDA_H_
