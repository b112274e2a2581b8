// The CPU functor of MetalOpsTruncExp / MetalOpsTruncExpGrad, run by the
// TensorFlow kernels (kernels/trunc_exp/trunc_exp_kernels.cc, kernel class
// kernels/trunc_exp/trunc_exp_kernel.h) and the XLA host handler
// (kernels/trunc_exp/trunc_exp_xla.cc): the ranges of kernels/trunc_exp/trunc_exp_cpu.h
// over the context's pool, or the op's Metal plans where
// kernels/cpu/metal_offload.h sends the call.
#ifndef MO_KERNELS_TRUNC_EXP_TRUNC_EXP_FUNCTOR_H_
#define MO_KERNELS_TRUNC_EXP_TRUNC_EXP_FUNCTOR_H_

#include <cstdint>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/trunc_exp/trunc_exp_cpu.h"
#include "kernels/trunc_exp/trunc_exp_plan.h"
#include "kernels/trunc_exp/trunc_exp_kernel.h"

namespace mo {

template <typename T>
struct TruncExpFunctor<Eigen::ThreadPoolDevice, T> {
  // Cycles per element for TF's shard sizing: one exp and a few conversions.
  static constexpr int64_t kForwardCycles = 20;
  static constexpr int64_t kBackwardCycles = 25;

  static absl::Status Forward(cpu::Context ctx, const T* x, int64_t n, T* y) {
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

  static absl::Status Backward(cpu::Context ctx, const T* dy, const T* x, int64_t n, T* dx) {
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

}  // namespace mo

#endif  // MO_KERNELS_TRUNC_EXP_TRUNC_EXP_FUNCTOR_H_
