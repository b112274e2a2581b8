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
#include "kernels/framework/register_kernels.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
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

// The kernel (one op, no gradient op: ZeroOut's gradient is ZeroOut).
template <typename T>
using CpuKernel = PointwiseOp<Cpu<T>, T, Attrs, kPointSize>;

}  // namespace
}  // namespace zero_out
}  // namespace mo

MO_REGISTER("ZeroOut", DEVICE_CPU, int32_t, ::mo::zero_out::CpuKernel<int32_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, int64_t, ::mo::zero_out::CpuKernel<int64_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, float, ::mo::zero_out::CpuKernel<float>);
MO_REGISTER("ZeroOut", DEVICE_CPU, double, ::mo::zero_out::CpuKernel<double>);

#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"

MO_XLA_FFI_ATTRS(::mo::zero_out::Attrs);

// XLA's host handler: the attribute bound whole (kernels/xla/xla_ffi.h).
namespace mo::zero_out {
namespace {

using xla_kernels::Data;
using xla_kernels::HostContext;
using xla_kernels::RetBuffer;
namespace ffi = ::xla::ffi;

ffi::Error XlaForward(ffi::AnyBuffer in, RetBuffer out, Attrs a) {
  const int64_t n = static_cast<int64_t>(in.element_count());
  return xla_ffi::ForTypeUnlessEmpty<int32_t, int64_t, float, double>(in.element_type(), n, "ZeroOut", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(Cpu<T>::Forward(HostContext(), Data<T>(in), n, a, Data<T>(out)));
  });
}

MO_XLA_FFI_HANDLER("ZeroOut", "Host", XlaForward, xla_ffi::BindBuffers<1, 1>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::zero_out
#endif  // MO_XLA
