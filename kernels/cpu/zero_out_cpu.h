// The CPU functor of ZeroOut, run by the TensorFlow kernel
// (kernels/cpu/zero_out_kernels.cc, kernel class kernels/zero_out_kernel.h)
// and the XLA host handler (kernels/xla/zero_out_xla.cc). The element rule is
// kernels/common/zero_out.h.
#ifndef MO_KERNELS_CPU_ZERO_OUT_CPU_H_
#define MO_KERNELS_CPU_ZERO_OUT_CPU_H_

#include <cstdint>

#include "kernels/common/zero_out.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/zero_out_kernel.h"

namespace mo {

template <typename T>
struct ZeroOutFunctor<Eigen::ThreadPoolDevice, T> {
  static absl::Status Compute(cpu::Context, const T* in, T* out, int64_t n, int64_t preserve_index) {
    for (int64_t i = 0; i < n; ++i) out[i] = zero_out_element(in[i], i, preserve_index);
    return absl::OkStatus();
  }
};

}  // namespace mo

#endif  // MO_KERNELS_CPU_ZERO_OUT_CPU_H_
