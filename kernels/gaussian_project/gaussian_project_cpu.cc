// GaussianProject on the CPU: the TensorFlow kernels of
// MetalOpsGaussianProject / MetalOpsGaussianProjectGrad (the kernel class of
// gaussian_project.h over the CPU functor below). The functor first checks
// the Gaussians' values, then runs ranges of Gaussians over the context's
// pool, or the op's Metal plans where kernels/cpu/metal_offload.h sends the
// call; and XLA's host handlers of the same functor, for the calls
// gaussian_project_xla.cc emits. The formulas are gaussian_project.h's.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before gaussian_project.h: its kernel class
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#define MO_TF_KERNEL  // gaussian_project.h's kernel class
#include "kernels/gaussian_project/gaussian_project.h"

namespace mo {
namespace gaussian_project_cpu {

// The error naming the first Gaussian whose values are refused.
inline absl::Status CheckValues(const cpu::Context& ctx, const float* means, const float* quats, const float* scales,
                                int64_t n) {
  std::atomic<int64_t> first_bad(n);
  cpu::ParallelFor(ctx, n, 20, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end && i < first_bad.load(std::memory_order_relaxed); ++i) {
      if (gp_bad_values(means + 3 * i, quats + 4 * i, scales + 3 * i) != kGpGood) {
        int64_t cur = first_bad.load();
        while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
        }
        return;
      }
    }
  });
  const int64_t i = first_bad.load();
  if (i == n) return absl::OkStatus();
  return checks::ToStatus(gaussian_project::GaussianValues(i, means + 3 * i, quats + 4 * i, scales + 3 * i));
}

// The bytes of a [n, k] float or int32 tensor.
inline uint64_t Bytes(int64_t n, int64_t k) { return static_cast<uint64_t>(n * k) * sizeof(float); }

// One pass over the n Gaussians: Metal's plan build() on `slots`, or
// gaussian(i) for every one on the CPU, `cycles` a Gaussian.
template <typename BuildPlan, typename Gaussian>
absl::Status Pass(const cpu::Context& ctx, int64_t n, const BuildPlan& build,
                  std::initializer_list<metal_plan::HostTensor> slots, int cycles, const Gaussian& gaussian) {
  return cpu::MetalOrCpu(
      ctx, [&](const cpu::MetalRoute& metal) { return metal.Run(n, build, slots); },
      [&] {
        cpu::ParallelFor(ctx, n, cycles, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) gaussian(i);
        });
      });
}

}  // namespace gaussian_project_cpu

template <>
struct GaussianProjectFunctor<Eigen::ThreadPoolDevice> {
  static absl::Status Forward(cpu::Context ctx, const float* means, const float* quats, const float* scales,
                              const float* opacities, const float* viewmat, const float* k, int64_t n,
                              const gaussian_project::Attrs& a, float* means2d, float* conics, float* depths,
                              int32_t* radii) {
    using gaussian_project_cpu::Bytes;
    TF_RETURN_IF_ERROR(gaussian_project_cpu::CheckValues(ctx, means, quats, scales, n));
    const GpCamera cam = gp_camera(viewmat, k, a.width, a.height);
    return gaussian_project_cpu::Pass(
        ctx, n, [&] { return metal_plan::GaussianProjectForward(n, a); },
        {cpu::Slot(means, Bytes(n, 3)), cpu::Slot(quats, Bytes(n, 4)), cpu::Slot(scales, Bytes(n, 3)),
         cpu::Slot(opacities, Bytes(n, 1)), cpu::Slot(viewmat, Bytes(4, 4)), cpu::Slot(k, Bytes(3, 3)),
         cpu::Slot(means2d, Bytes(n, 2)), cpu::Slot(conics, Bytes(n, 3)), cpu::Slot(depths, Bytes(n, 1)),
         cpu::Slot(radii, Bytes(n, 2))},
        300, [&](int64_t i) {
          gp_project(cam, means + 3 * i, quats + 4 * i, scales + 3 * i, opacities[i], a.near_plane, a.far_plane,
                     a.eps2d, means2d + 2 * i, conics + 3 * i, depths + i, radii + 2 * i);
        });
  }

  static absl::Status Backward(cpu::Context ctx, const float* grad_means2d, const float* grad_conics,
                               const float* grad_depths, const float* means, const float* quats, const float* scales,
                               const float* viewmat, const float* k, const int32_t* radii, int64_t n,
                               const gaussian_project::Attrs& a, float* grad_means, float* grad_quats,
                               float* grad_scales) {
    using gaussian_project_cpu::Bytes;
    const GpCamera cam = gp_camera(viewmat, k, a.width, a.height);
    return gaussian_project_cpu::Pass(
        ctx, n, [&] { return metal_plan::GaussianProjectBackward(n, a); },
        {cpu::Slot(grad_means2d, Bytes(n, 2)), cpu::Slot(grad_conics, Bytes(n, 3)),
         cpu::Slot(grad_depths, Bytes(n, 1)), cpu::Slot(means, Bytes(n, 3)), cpu::Slot(quats, Bytes(n, 4)),
         cpu::Slot(scales, Bytes(n, 3)), cpu::Slot(viewmat, Bytes(4, 4)), cpu::Slot(k, Bytes(3, 3)),
         cpu::Slot(radii, Bytes(n, 2)), cpu::Slot(grad_means, Bytes(n, 3)), cpu::Slot(grad_quats, Bytes(n, 4)),
         cpu::Slot(grad_scales, Bytes(n, 3))},
        600, [&](int64_t i) {
          gp_backward(cam, means + 3 * i, quats + 4 * i, scales + 3 * i, radii[2 * i], a.eps2d, grad_means2d + 2 * i,
                      grad_conics + 3 * i, grad_depths[i], grad_means + 3 * i, grad_quats + 4 * i,
                      grad_scales + 3 * i);
        });
  }
};

}  // namespace mo

MO_REGISTER_GAUSSIAN_PROJECT(DEVICE_CPU, ::Eigen::ThreadPoolDevice);

#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"

MO_XLA_FFI_ATTRS(::mo::gaussian_project::Attrs);

// XLA's host handlers: the attributes bound whole (kernels/xla/xla_ffi.h).
namespace mo::gaussian_project {
namespace {

using xla_kernels::Data;
using xla_kernels::HostContext;
using xla_kernels::RetBuffer;
using Functor = GaussianProjectFunctor<Eigen::ThreadPoolDevice>;
namespace ffi = ::xla::ffi;

ffi::Error XlaForward(ffi::AnyBuffer means, ffi::AnyBuffer quats, ffi::AnyBuffer scales, ffi::AnyBuffer opacities,
                      ffi::AnyBuffer viewmat, ffi::AnyBuffer k, RetBuffer means2d, RetBuffer conics,
                      RetBuffer depths, RetBuffer radii, Attrs a) {
  const int64_t n = static_cast<int64_t>(means.element_count()) / 3;
  if (n == 0) return ffi::Error::Success();
  return xla_ffi::ToError(Functor::Forward(HostContext(), Data<float>(means), Data<float>(quats),
                                           Data<float>(scales), Data<float>(opacities), Data<float>(viewmat),
                                           Data<float>(k), n, a,
                                           Data<float>(means2d), Data<float>(conics), Data<float>(depths),
                                           Data<int32_t>(radii)));
}

ffi::Error XlaBackward(ffi::AnyBuffer grad_means2d, ffi::AnyBuffer grad_conics, ffi::AnyBuffer grad_depths,
                       ffi::AnyBuffer means, ffi::AnyBuffer quats, ffi::AnyBuffer scales, ffi::AnyBuffer viewmat,
                       ffi::AnyBuffer k, ffi::AnyBuffer radii, RetBuffer grad_means, RetBuffer grad_quats,
                       RetBuffer grad_scales, Attrs a) {
  const int64_t n = static_cast<int64_t>(means.element_count()) / 3;
  if (n == 0) return ffi::Error::Success();
  return xla_ffi::ToError(Functor::Backward(
      HostContext(), Data<float>(grad_means2d), Data<float>(grad_conics), Data<float>(grad_depths),
      Data<float>(means), Data<float>(quats), Data<float>(scales), Data<float>(viewmat), Data<float>(k),
      Data<int32_t>(radii), n, a, Data<float>(grad_means), Data<float>(grad_quats), Data<float>(grad_scales)));
}

MO_XLA_FFI_HANDLER("MetalOpsGaussianProject", "Host", XlaForward, xla_ffi::BindBuffers<6, 4>().Attrs<Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsGaussianProjectGrad", "Host", XlaBackward, xla_ffi::BindBuffers<9, 3>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::gaussian_project
#endif  // MO_XLA
