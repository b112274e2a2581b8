// The CPU functor of ZeroOut, run by the TensorFlow kernel
// (kernels/zero_out/zero_out_kernels.cc, kernel class kernels/zero_out/zero_out_kernel.h)
// and the XLA host handler (kernels/zero_out/zero_out_xla.cc). The element rule is
// kernels/zero_out/zero_out.h; the op's Metal plan, for the element types the
// shaders have, where kernels/cpu/metal_offload.h sends the call.
#ifndef MO_KERNELS_ZERO_OUT_ZERO_OUT_FUNCTOR_H_
#define MO_KERNELS_ZERO_OUT_ZERO_OUT_FUNCTOR_H_

#include <cstdint>

#include "kernels/zero_out/zero_out.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/zero_out/zero_out_plan.h"
#include "kernels/zero_out/zero_out_kernel.h"

namespace mo {

template <typename T>
struct ZeroOutFunctor<Eigen::ThreadPoolDevice, T> {
  static absl::Status Compute(cpu::Context ctx, const T* in, T* out, int64_t n, int64_t preserve_index) {
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    return cpu::MetalOrCpu<cpu::kHasMetalDtype<T>>(
        ctx,
        [&](const auto& metal) {
          return metal.Run(n, [&] { return metal_plan::ZeroOut(cpu::MetalDtype<T>(), n, preserve_index); },
                           {cpu::Slot(in, bytes), cpu::Slot(out, bytes)});
        },
        [&] {
          for (int64_t i = 0; i < n; ++i) out[i] = zero_out_element(in[i], i, preserve_index);
        });
  }
};

}  // namespace mo

#endif  // MO_KERNELS_ZERO_OUT_ZERO_OUT_FUNCTOR_H_
