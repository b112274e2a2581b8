// The CPU functor of MetalOpsSceneContract / MetalOpsSceneContractGrad, run by
// the TensorFlow kernels (kernels/scene_contract/scene_contract_kernels.cc, kernel
// class kernels/scene_contract/scene_contract_kernel.h): ranges of points over
// TF's intra-op thread pool, or the op's Metal plans where
// kernels/cpu/metal_offload.h sends the call. The arithmetic is
// kernels/scene_contract/scene_contract.h, in float32 for float and float16
// tensors, instantiated per norm so its branch folds.
#ifndef MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_FUNCTOR_H_
#define MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_FUNCTOR_H_

#include <cstdint>

#include "kernels/scene_contract/scene_contract.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/scene_contract/scene_contract_plan.h"
#include "kernels/scene_contract/scene_contract_kernel.h"

namespace mo {
namespace scene_contract_cpu {

template <int Norm, typename T>
void ForwardRange(const T* x, int64_t begin, int64_t end, T* y) {
  for (int64_t i = begin; i < end; ++i) {
    float out[3];
    scene_contract_forward(static_cast<float>(x[3 * i]), static_cast<float>(x[3 * i + 1]),
                           static_cast<float>(x[3 * i + 2]), Norm, out);
    for (int k = 0; k < 3; ++k) y[3 * i + k] = static_cast<T>(out[k]);
  }
}

template <int Norm, typename T>
void BackwardRange(const T* grad, const T* x, int64_t begin, int64_t end, T* dx) {
  for (int64_t i = begin; i < end; ++i) {
    float out[3];
    scene_contract_grad(static_cast<float>(x[3 * i]), static_cast<float>(x[3 * i + 1]),
                        static_cast<float>(x[3 * i + 2]), Norm, static_cast<float>(grad[3 * i]),
                        static_cast<float>(grad[3 * i + 1]), static_cast<float>(grad[3 * i + 2]), out);
    for (int k = 0; k < 3; ++k) dx[3 * i + k] = static_cast<T>(out[k]);
  }
}

}  // namespace scene_contract_cpu

template <typename T>
struct SceneContractFunctor<Eigen::ThreadPoolDevice, T> {
  // Cycles per point for TF's shard sizing: a square root, a few divisions.
  static constexpr int64_t kForwardCycles = 60;
  static constexpr int64_t kBackwardCycles = 80;

  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, int norm, T* y) {
    const uint64_t bytes = static_cast<uint64_t>(n) * 3 * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(3 * n, [&] { return metal_plan::SceneContractForward(cpu::MetalDtype<T>(), n, norm); },
                           {cpu::Slot(x, bytes), cpu::Slot(y, bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, n, kForwardCycles, [&](int64_t begin, int64_t end) {
            if (norm == kSceneContractL2) {
              scene_contract_cpu::ForwardRange<kSceneContractL2>(x, begin, end, y);
            } else {
              scene_contract_cpu::ForwardRange<kSceneContractLinf>(x, begin, end, y);
            }
          });
        });
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* x, int64_t n, int norm,
                               T* dx) {
    const uint64_t bytes = static_cast<uint64_t>(n) * 3 * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(3 * n, [&] { return metal_plan::SceneContractBackward(cpu::MetalDtype<T>(), n, norm); },
                           {cpu::Slot(grad, bytes), cpu::Slot(x, bytes), cpu::Slot(dx, bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, n, kBackwardCycles, [&](int64_t begin, int64_t end) {
            if (norm == kSceneContractL2) {
              scene_contract_cpu::BackwardRange<kSceneContractL2>(grad, x, begin, end, dx);
            } else {
              scene_contract_cpu::BackwardRange<kSceneContractLinf>(grad, x, begin, end, dx);
            }
          });
        });
  }
};

}  // namespace mo

#endif  // MO_KERNELS_SCENE_CONTRACT_SCENE_CONTRACT_FUNCTOR_H_
