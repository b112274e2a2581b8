// SceneContract on the CPU: the TensorFlow kernels of MetalOpsSceneContract /
// MetalOpsSceneContractGrad (kernels/framework/pointwise_kernel.h over the CPU
// functor below): ranges of points over TF's intra-op thread pool, or the
// op's Metal plans where kernels/cpu/metal_offload.h sends the call. The
// arithmetic is scene_contract.h's, in float32 for float and float16 tensors,
// instantiated per norm so its branch folds.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>

#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/framework/pointwise_kernel.h"
#include "kernels/scene_contract/scene_contract.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace scene_contract {
namespace {

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

// The functor, for n > 0 points (x, y, grad and dx [n, 3]).
template <typename T>
struct Cpu {
  // Cycles per point for TF's shard sizing: a square root, a few divisions.
  static constexpr int64_t kForwardCycles = 60;
  static constexpr int64_t kBackwardCycles = 80;

  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const T* x, int64_t n, const Attrs& a, T* y) {
    const uint64_t bytes = static_cast<uint64_t>(n) * 3 * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(3 * n, [&] { return metal_plan::SceneContractForward(cpu::MetalDtype<T>(), n, a); },
                           {cpu::Slot(x, bytes), cpu::Slot(y, bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, n, kForwardCycles, [&](int64_t begin, int64_t end) {
            if (a.norm == kSceneContractL2) {
              ForwardRange<kSceneContractL2>(x, begin, end, y);
            } else {
              ForwardRange<kSceneContractLinf>(x, begin, end, y);
            }
          });
        });
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const T* grad, const T* x, int64_t n,
                               const Attrs& a, T* dx) {
    const uint64_t bytes = static_cast<uint64_t>(n) * 3 * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(3 * n, [&] { return metal_plan::SceneContractBackward(cpu::MetalDtype<T>(), n, a); },
                           {cpu::Slot(grad, bytes), cpu::Slot(x, bytes), cpu::Slot(dx, bytes)});
        },
        [&] {
          cpu::ParallelFor(ctx, n, kBackwardCycles, [&](int64_t begin, int64_t end) {
            if (a.norm == kSceneContractL2) {
              BackwardRange<kSceneContractL2>(grad, x, begin, end, dx);
            } else {
              BackwardRange<kSceneContractLinf>(grad, x, begin, end, dx);
            }
          });
        });
  }
};

}  // namespace
}  // namespace scene_contract
}  // namespace mo

MO_REGISTER_POINTWISE("MetalOpsSceneContract", DEVICE_CPU, ::mo::scene_contract::Cpu, ::mo::scene_contract);
