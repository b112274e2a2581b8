// The CPU functor of ZeroOut (the kernel class is kernels/zero_out_kernel.h). The
// per-element rule is kernels/common/zero_out.h.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/common/zero_out.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/metal_plan/simple_plans.h"
#include "kernels/zero_out_kernel.h"
#include "kernels/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct ZeroOutFunctor<CPUDevice, T> {
  static absl::Status Compute(::tensorflow::OpKernelContext* ctx, const T* in, T* out, int64_t n,
                              int64_t preserve_index) {
    if constexpr (cpu::kHasMetalDtype<T>) {
      absl::Status status;
      const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
      if (cpu::RunOnMetal(ctx, n, [&] { return metal_plan::ZeroOut(cpu::MetalDtype<T>(), n, preserve_index); },
                          {cpu::Slot(in, bytes), cpu::Slot(out, bytes)}, &status)) {
        return status;
      }
    }
    for (int64_t i = 0; i < n; ++i) out[i] = zero_out_element(in[i], i, preserve_index);
    return absl::OkStatus();
  }
};

MO_REGISTER("ZeroOut", DEVICE_CPU, int32_t, ZeroOutOp<CPUDevice, int32_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, int64_t, ZeroOutOp<CPUDevice, int64_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, float, ZeroOutOp<CPUDevice, float>);
MO_REGISTER("ZeroOut", DEVICE_CPU, double, ZeroOutOp<CPUDevice, double>);

}  // namespace mo
