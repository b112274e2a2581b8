// RobustLoss on the CPU: the TensorFlow kernels of MetalOpsRobustLoss /
// MetalOpsRobustLossGrad (the kernel classes of robust_loss.h over the CPU
// functor below) and XLA's host handlers of the same functor, for the calls
// robust_loss_xla.cc emits. The functor runs the CPU bodies of robust_loss.h
// over the context's pool, per-channel coefficients computed once; or the
// op's Metal plans, for the element types the shaders have, where
// kernels/cpu/metal_offload.h sends the call.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_CPU_BODIES  // robust_loss.h's CPU bodies
#define MO_TF_KERNEL   // robust_loss.h's kernel classes
#include "kernels/robust_loss/robust_loss.h"

namespace mo {
// Named, not anonymous: the functor below (external linkage) captures these
// types in its lambdas (g++'s -Wsubobject-linkage).
namespace robust_loss_cpu {

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
  cpu::Context ctx;
  template <typename Fn>
  void operator()(int64_t units, int64_t cycles_per_unit, const Fn& fn) const {
    cpu::ParallelFor(ctx, units, cycles_per_unit, fn);
  }
};

}  // namespace robust_loss_cpu

template <typename T>
struct RobustLossFunctor<Eigen::ThreadPoolDevice, T> {
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

  static absl::Status Forward(cpu::Context ctx, const RobustLossArgs<T>& args, T* ys) {
    const uint64_t bytes = static_cast<uint64_t>(args.n) * sizeof(T);
    return cpu::MetalOrCpu<cpu::kHasMetalDtype<T>>(
        ctx,
        [&](const auto& metal) {
          return metal.Run(args.n, [&] { return metal_plan::RobustLossForward(cpu::MetalDtype<T>(), Layout(args)); },
                           {cpu::Slot(args.x, bytes), cpu::Slot(args.alpha, ParamBytes(args, args.layout.alpha_vec)),
                            cpu::Slot(args.scale, ParamBytes(args, args.layout.scale_vec)), cpu::Slot(ys, bytes)});
        },
        [&] {
          robust_loss_cpu::Forward(robust_loss_cpu::ChannelCoeffs(args), args.x, ys, args.n,
                                   robust_loss_cpu::CtxParallelFor{ctx});
        });
  }

  static absl::Status Backward(cpu::Context ctx, const RobustLossArgs<T>& args, const T* gs, T* dxs,
                               float* das, float* dcs) {
    const uint64_t bytes = static_cast<uint64_t>(args.n) * sizeof(T);
    const uint64_t alpha_bytes = ParamBytes(args, args.layout.alpha_vec);
    const uint64_t scale_bytes = ParamBytes(args, args.layout.scale_vec);
    return cpu::MetalOrCpu<cpu::kHasMetalDtype<T>>(
        ctx,
        [&](const auto& metal) {
          return metal.Run(
              args.n,
              [&] {
                return metal_plan::RobustLossBackward(cpu::MetalDtype<T>(), Layout(args), alpha_bytes / 4,
                                                      scale_bytes / 4);
              },
              {cpu::Slot(gs, bytes), cpu::Slot(args.x, bytes), cpu::Slot(args.alpha, alpha_bytes),
               cpu::Slot(args.scale, scale_bytes), cpu::Slot(dxs, bytes), cpu::Slot(das, alpha_bytes),
               cpu::Slot(dcs, scale_bytes)});
        },
        [&] { return BackwardOnCpu(ctx, args, gs, dxs, das, dcs); });
  }

 private:
  static absl::Status BackwardOnCpu(cpu::Context ctx, const RobustLossArgs<T>& args, const T* gs, T* dxs,
                                    float* das, float* dcs) {
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
    robust_loss_cpu::Backward(robust_loss_cpu::ChannelCoeffs(args), gs, args.x, dxs, n, sum_a.data(), sum_c.data(),
                              robust_loss_cpu::CtxParallelFor{ctx});
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

}  // namespace mo

MO_REGISTER_CPU_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, Eigen::half);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsRobustLoss", RobustLoss, ::tensorflow::bfloat16);

#if MO_XLA
// XLA's host handlers of the same functor (no attribute).
namespace mo::xla_kernels {
namespace {

// The functor's arguments, the layout checked again (cheap) from the buffers.
template <typename T>
ffi::Error ArgsOf(const ffi::AnyBuffer& x, const ffi::AnyBuffer& alpha, const ffi::AnyBuffer& scale,
                  RobustLossArgs<T>* args) {
  ffi::Error shapes = xla_ffi::ToError(
      robust_loss::ParamShapes(xla_ffi::DimsOf(x), xla_ffi::DimsOf(alpha), xla_ffi::DimsOf(scale), &args->layout));
  if (shapes.failure()) return shapes;
  args->n = static_cast<int64_t>(x.element_count());
  args->x = Data<T>(x);
  args->alpha = Data<float>(alpha);
  args->scale = Data<float>(scale);
  return xla_ffi::ToError(RobustLossFunctor<Eigen::ThreadPoolDevice, T>::CheckParamValues(*args));
}

ffi::Error Forward(ffi::AnyBuffer x, ffi::AnyBuffer alpha, ffi::AnyBuffer scale, RetBuffer y) {
  return xla_ffi::ForType<float, Eigen::half, ::tensorflow::bfloat16>(x.element_type(), "RobustLoss", [&](auto type) {
    using T = decltype(type);
    RobustLossArgs<T> args;
    ffi::Error error = ArgsOf(x, alpha, scale, &args);
    if (error.failure() || args.n == 0) return error;
    return xla_ffi::ToError(RobustLossFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), args, Data<T>(y)));
  });
}

ffi::Error Backward(ffi::AnyBuffer grad, ffi::AnyBuffer x, ffi::AnyBuffer alpha, ffi::AnyBuffer scale,
                    RetBuffer dx, RetBuffer dalpha, RetBuffer dscale) {
  return xla_ffi::ForType<float, Eigen::half, ::tensorflow::bfloat16>(x.element_type(), "RobustLossGrad", [&](auto type) {
    using T = decltype(type);
    RobustLossArgs<T> args;
    ffi::Error error = ArgsOf(x, alpha, scale, &args);
    if (error.failure()) return error;
    return xla_ffi::ToError(RobustLossFunctor<Eigen::ThreadPoolDevice, T>::Backward(
        HostContext(), args, Data<T>(grad), Data<T>(dx), Data<float>(dalpha), Data<float>(dscale)));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsRobustLoss", "Host", Forward, xla_ffi::BindBuffers<3, 1>());
MO_XLA_FFI_HANDLER("MetalOpsRobustLossGrad", "Host", Backward, xla_ffi::BindBuffers<4, 3>());

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
