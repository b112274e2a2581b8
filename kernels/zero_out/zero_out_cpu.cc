// ZeroOut on the CPU: the TensorFlow kernel of ZeroOut
// (kernels/framework/pointwise_kernel.h over the CPU functor below, a point
// one element) and XLA's host handler of the same functor, for the call
// zero_out_xla.cc emits. The element rule is zero_out.h's; the op's Metal
// plan runs the call, for the element types the shader has, where
// kernels/cpu/metal_offload.h sends it.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/xla/pointwise_xla.h"
#include "kernels/zero_out/zero_out.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace zero_out {
namespace {

// The functor, for n > 0 elements.
template <typename T>
struct Cpu {
  static absl::Status Forward(cpu::Context ctx, const T* in, int64_t n, const Attrs& a, T* out) {
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    return cpu::MetalOrCpu<cpu::kHasMetalDtype<T>>(
        ctx,
        [&](const auto& metal) {
          return metal.Run(n, [&] { return metal_plan::ZeroOut(cpu::MetalDtype<T>(), n, a); },
                           {cpu::Slot(in, bytes), cpu::Slot(out, bytes)});
        },
        [&] {
          for (int64_t i = 0; i < n; ++i) out[i] = zero_out_element(in[i], i, a.preserve_index);
        });
  }
};

}  // namespace
}  // namespace zero_out
}  // namespace mo

// The kernel (one op, no gradient op: ZeroOut's gradient is ZeroOut).
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_CPU, ::mo::zero_out::Cpu, ::mo::zero_out, int32_t);
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_CPU, ::mo::zero_out::Cpu, ::mo::zero_out, int64_t);
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_CPU, ::mo::zero_out::Cpu, ::mo::zero_out, float);
MO_REGISTER_POINTWISE_FORWARD("ZeroOut", DEVICE_CPU, ::mo::zero_out::Cpu, ::mo::zero_out, double);

// XLA's host handler: the CPU functor above, the attribute bound whole.
MO_XLA_POINTWISE_HANDLER("ZeroOut", "ZeroOut", Host, Cpu, mo::zero_out, int32_t, int64_t, float, double);
