// TruncExp on the CPU: the TensorFlow kernels of MetalOpsTruncExp /
// MetalOpsTruncExpGrad (kernels/framework/pointwise_kernel.h over the CPU
// functor below) and XLA's host handlers of the same functor, for the calls
// trunc_exp_xla.cc emits. The functor runs the CPU bodies of trunc_exp.h over
// the context's pool, or the op's Metal plans where kernels/cpu/metal_offload.h
// sends the call.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#define MO_CPU_BODIES  // trunc_exp.h's CPU bodies
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/trunc_exp/trunc_exp.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace trunc_exp {
namespace {

// The functor, for n > 0 elements.
template <typename T>
struct Cpu {
  // Cycles per element for TF's shard sizing: one exp and a few conversions.
  static constexpr int64_t kForwardCycles = 20;
  static constexpr int64_t kBackwardCycles = 25;

  static absl::Status Forward(cpu::Context ctx, const T* x, int64_t n, const Attrs&, T* y) {
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(n, [&] { return metal_plan::TruncExpForward(cpu::MetalDtype<T>(), n); },
                           {cpu::Slot(x, bytes), cpu::Slot(y, bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, n, kForwardCycles,
                           [&](int64_t begin, int64_t end) { trunc_exp_cpu::Forward(x, y, begin, end); });
        });
  }

  static absl::Status Backward(cpu::Context ctx, const T* dy, const T* x, int64_t n, const Attrs&, T* dx) {
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(n, [&] { return metal_plan::TruncExpBackward(cpu::MetalDtype<T>(), n); },
                           {cpu::Slot(dy, bytes), cpu::Slot(x, bytes), cpu::Slot(dx, bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, n, kBackwardCycles,
                           [&](int64_t begin, int64_t end) { trunc_exp_cpu::Backward(dy, x, dx, begin, end); });
        });
  }
};

}  // namespace
}  // namespace trunc_exp
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsTruncExp", DEVICE_CPU, ::mo::trunc_exp::Cpu, ::mo::trunc_exp);

#if MO_XLA
// XLA's host handlers (no attribute).
namespace mo::trunc_exp {
namespace {

using xla_kernels::Data;
using xla_kernels::HostContext;
using xla_kernels::RetBuffer;
namespace ffi = ::xla::ffi;

ffi::Error XlaForward(ffi::AnyBuffer x, RetBuffer y) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExp", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(Cpu<T>::Forward(HostContext(), Data<T>(x), n, Attrs(), Data<T>(y)));
  });
}

ffi::Error XlaBackward(ffi::AnyBuffer dy, ffi::AnyBuffer x, RetBuffer dx) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  return xla_ffi::ForTypeUnlessEmpty<float, Eigen::half>(x.element_type(), n, "TruncExpGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(Cpu<T>::Backward(HostContext(), Data<T>(dy), Data<T>(x), n, Attrs(), Data<T>(dx)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsTruncExp", "Host", XlaForward, xla_ffi::BindBuffers<1, 1>());
MO_XLA_FFI_HANDLER("MetalOpsTruncExpGrad", "Host", XlaBackward, xla_ffi::BindBuffers<2, 1>());

}  // namespace
}  // namespace mo::trunc_exp
#endif  // MO_XLA
