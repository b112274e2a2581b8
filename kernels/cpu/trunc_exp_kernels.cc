// The CPU functor of MetalOpsTruncExp / MetalOpsTruncExpGrad (the kernel class
// is kernels/trunc_exp_kernel.h): ranges of elements over TF's intra-op thread
// pool. The arithmetic is kernels/common/trunc_exp.h, in float32 for float and
// float16 tensors.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/common/trunc_exp.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/metal_plan/simple_plans.h"
#include "kernels/register_kernels.h"
#include "kernels/trunc_exp_kernel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

// Cycles per element for TF's shard sizing: one exp and a few conversions.
constexpr int64_t kForwardCycles = 20;
constexpr int64_t kBackwardCycles = 25;

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct TruncExpFunctor<CPUDevice, T> {
  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, T* y) {
    absl::Status status;
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    if (cpu::RunOnMetal(ctx, n, [&] { return metal_plan::TruncExpForward(cpu::MetalDtype<T>(), n); },
                        {cpu::Slot(x, bytes), cpu::Slot(y, bytes)}, &status)) {
      return status;
    }
    cpu::ParallelFor(ctx, n, kForwardCycles, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(trunc_exp_forward(static_cast<float>(x[i])));
    });
    return absl::OkStatus();
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* dy, const T* x, int64_t n, T* dx) {
    absl::Status status;
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
    if (cpu::RunOnMetal(ctx, n, [&] { return metal_plan::TruncExpBackward(cpu::MetalDtype<T>(), n); },
                        {cpu::Slot(dy, bytes), cpu::Slot(x, bytes), cpu::Slot(dx, bytes)}, &status)) {
      return status;
    }
    cpu::ParallelFor(ctx, n, kBackwardCycles, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        dx[i] = static_cast<T>(trunc_exp_grad(static_cast<float>(dy[i]), static_cast<float>(x[i])));
      }
    });
    return absl::OkStatus();
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsTruncExp", TruncExp, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsTruncExp", TruncExp, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
