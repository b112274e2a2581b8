// The CPU functor of ZeroOut (the kernel class is kernels/zero_out_kernel.h). The
// per-element rule is kernels/common/zero_out.h.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/common/zero_out.h"
#include "kernels/zero_out_kernel.h"
#include "kernels/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct ZeroOutFunctor<CPUDevice, T> {
  static absl::Status Compute(::tensorflow::OpKernelContext*, const T* in, T* out, int64_t n, int64_t preserve_index) {
    for (int64_t i = 0; i < n; ++i) out[i] = zero_out_element(in[i], i, preserve_index);
    return absl::OkStatus();
  }
};

MO_REGISTER("ZeroOut", DEVICE_CPU, int32_t, ZeroOutOp<CPUDevice, int32_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, int64_t, ZeroOutOp<CPUDevice, int64_t>);
MO_REGISTER("ZeroOut", DEVICE_CPU, float, ZeroOutOp<CPUDevice, float>);
MO_REGISTER("ZeroOut", DEVICE_CPU, double, ZeroOutOp<CPUDevice, double>);

}  // namespace mo
