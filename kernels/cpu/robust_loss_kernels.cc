// The CPU functor of MetalOpsRobustLoss / MetalOpsRobustLossGrad (the kernel
// class is kernels/robust_loss_kernel.h): TF's intra-op thread pool. The
// arithmetic is kernels/common/robust_loss.h.
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/robust_loss.h"
#include "kernels/cpu/robust_loss_cpu.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/robust_loss_kernel.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/metal_plan/simple_plans.h"
#include "kernels/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/spec/robust_loss_spec.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"

namespace mo {
// Named, not anonymous: the functor below (external linkage) captures these
// types in its lambdas (g++'s -Wsubobject-linkage).
namespace robust_loss_cpu {

using ::tensorflow::OpKernelContext;

// The per-channel constants of the formula (one entry when both are scalars).
template <typename T>
std::vector<mo::RobustLossCoeffs> ChannelCoeffs(const RobustLossArgs<T>& args) {
  const robust_loss::ParamLayout& layout = args.layout;
  std::vector<mo::RobustLossCoeffs> coeffs(layout.channels);
  for (int64_t col = 0; col < layout.channels; ++col) {
    coeffs[col] =
        mo::robust_loss_coeffs(args.alpha[layout.alpha_vec ? col : 0], args.scale[layout.scale_vec ? col : 0]);
  }
  return coeffs;
}

// The bodies' parallel_for: TF's intra-op pool.
struct CtxParallelFor {
  OpKernelContext* ctx;
  template <typename Fn>
  void operator()(int64_t units, int64_t cycles_per_unit, const Fn& fn) const {
    cpu::ParallelFor(ctx, units, cycles_per_unit, fn);
  }
};

}  // namespace robust_loss_cpu

using namespace robust_loss_cpu;  // NOLINT: the functor's helpers

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct RobustLossFunctor<CPUDevice, T> {
  static metal_plan::RobustLossLayout Layout(const RobustLossArgs<T>& args) {
    return {args.n, args.layout.channels, args.layout.alpha_vec, args.layout.scale_vec};
  }
  static uint64_t ParamBytes(const RobustLossArgs<T>& args, bool per_channel) {
    return static_cast<uint64_t>(per_channel ? args.layout.channels : 1) * sizeof(float);
  }

  // alpha and scale are in host memory here.
  static absl::Status CheckParamValues(const RobustLossArgs<T>& args) {
    const robust_loss::ParamLayout& layout = args.layout;
    return checks::ToStatus(robust_loss::ParamValues(args.alpha, layout.alpha_vec ? layout.channels : 1, args.scale,
                                                     layout.scale_vec ? layout.channels : 1));
  }

  static absl::Status Forward(OpKernelContext* ctx, const RobustLossArgs<T>& args, T* ys) {
    if constexpr (cpu::kHasMetalDtype<T>) {
      absl::Status status;
      const uint64_t bytes = static_cast<uint64_t>(args.n) * sizeof(T);
      if (cpu::RunOnMetal(ctx, args.n, [&] { return metal_plan::RobustLossForward(cpu::MetalDtype<T>(), Layout(args)); },
                          {cpu::Slot(args.x, bytes), cpu::Slot(args.alpha, ParamBytes(args, args.layout.alpha_vec)),
                           cpu::Slot(args.scale, ParamBytes(args, args.layout.scale_vec)), cpu::Slot(ys, bytes)},
                          &status)) {
        return status;
      }
    }
    robust_loss_cpu::Forward(ChannelCoeffs(args), args.x, ys, args.n, CtxParallelFor{ctx});
    return absl::OkStatus();
  }

  static absl::Status Backward(OpKernelContext* ctx, const RobustLossArgs<T>& args, const T* gs, T* dxs,
                               float* das, float* dcs) {
    if constexpr (cpu::kHasMetalDtype<T>) {
      absl::Status status;
      const uint64_t bytes = static_cast<uint64_t>(args.n) * sizeof(T);
      const uint64_t alpha_bytes = ParamBytes(args, args.layout.alpha_vec);
      const uint64_t scale_bytes = ParamBytes(args, args.layout.scale_vec);
      if (cpu::RunOnMetal(ctx, args.n,
                          [&] {
                            return metal_plan::RobustLossBackward(cpu::MetalDtype<T>(), Layout(args), alpha_bytes / 4,
                                                                  scale_bytes / 4);
                          },
                          {cpu::Slot(gs, bytes), cpu::Slot(args.x, bytes), cpu::Slot(args.alpha, alpha_bytes),
                           cpu::Slot(args.scale, scale_bytes), cpu::Slot(dxs, bytes), cpu::Slot(das, alpha_bytes),
                           cpu::Slot(dcs, scale_bytes)},
                          &status)) {
        return status;
      }
    }
    const int64_t n = args.n;
    const robust_loss::ParamLayout& layout = args.layout;
    const int64_t channels = layout.channels;
    if (n == 0) {
      std::fill(das, das + (layout.alpha_vec ? channels : 1), 0.0f);
      std::fill(dcs, dcs + (layout.scale_vec ? channels : 1), 0.0f);
      return absl::OkStatus();
    }
    // Per channel, then over channels for a scalar parameter.
    std::vector<double> sum_a(channels, 0.0), sum_c(channels, 0.0);
    robust_loss_cpu::Backward(ChannelCoeffs(args), gs, args.x, dxs, n, sum_a.data(), sum_c.data(),
                              CtxParallelFor{ctx});
    double total_a = 0.0, total_c = 0.0;
    for (int64_t col = 0; col < channels; ++col) {
      total_a += sum_a[col];
      total_c += sum_c[col];
    }
    if (layout.alpha_vec) {
      for (int64_t col = 0; col < channels; ++col) das[col] = static_cast<float>(sum_a[col]);
    } else {
      das[0] = static_cast<float>(total_a);
    }
    if (layout.scale_vec) {
      for (int64_t col = 0; col < channels; ++col) dcs[col] = static_cast<float>(sum_c[col]);
    } else {
      dcs[0] = static_cast<float>(total_c);
    }
    return absl::OkStatus();
  }
};

MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_CPU, CPUDevice, Eigen::half);
MO_REGISTER_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, DEVICE_CPU, CPUDevice, ::tensorflow::bfloat16);

}  // namespace mo
