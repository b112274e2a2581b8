// The CPU functor of MetalOpsFusedMLP / MetalOpsFusedMLPGrad, run by the
// TensorFlow kernels (kernels/cpu/fused_mlp_kernels.cc, kernel class
// kernels/fused_mlp_kernel.h) and the XLA host handler
// (kernels/xla/fused_mlp_xla.cc): kernels/cpu/fused_mlp_cpu.h's blocks over
// the context's pool. float32 only on the CPU.
#ifndef MO_KERNELS_CPU_FUSED_MLP_FUNCTOR_H_
#define MO_KERNELS_CPU_FUSED_MLP_FUNCTOR_H_

#include "kernels/cpu/fused_mlp_cpu.h"  // first: it includes the intrinsics headers (simd.h)
#include "kernels/tf_eigen.h"  // next: silences a warning in TensorFlow's headers

#include <cstdint>
#include <functional>
#include <type_traits>

#include "kernels/cpu/cpu_context.h"
#include "kernels/fused_mlp_kernel.h"
#include "kernels/spec/fused_mlp_spec.h"
#include "tensorflow/core/platform/errors.h"

namespace mo {
namespace fused_mlp_cpu {

inline Shape ShapeOf(const fused_mlp::Net& net, int64_t n, const fused_mlp::Attrs& a) {
  return {n, static_cast<int>(net.in_dim), static_cast<int>(net.width), net.hidden_layers,
          static_cast<int>(net.out_dim), a.activation, a.output_activation, a.leaky_relu_alpha};
}

// fused_mlp_cpu's parallel-for on the op's intra-op pool, one unit per shard.
inline auto PoolOf(cpu::Context ctx) {
  return [ctx](int64_t units, const std::function<void(int64_t, int64_t)>& fn) {
    cpu::ParallelForBlocks(ctx, units, fn);
  };
}

}  // namespace fused_mlp_cpu

template <typename T>
struct FusedMlpFunctor<Eigen::ThreadPoolDevice, T> {
  static absl::Status Float16OnGpus() {
    return ::tensorflow::errors::InvalidArgument(
        "FusedMLP: float16 runs on GPUs (CUDA, Metal); on the CPU use float32 'x', 'kernels' and 'biases'");
  }

  static absl::Status Forward(cpu::Context ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                              const FusedMlpForwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      fused_mlp_cpu::Forward(fused_mlp_cpu::ShapeOf(net, args.n, a),
                             {args.x, args.kernels.data(), args.biases.data(), args.y, args.hidden}, fused_mlp_cpu::PoolOf(ctx));
      return absl::OkStatus();
    }
  }

  static absl::Status Backward(cpu::Context ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                               const FusedMlpBackwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      fused_mlp_cpu::Backward(fused_mlp_cpu::ShapeOf(net, args.n, a),
                              {args.grad_y, args.x, args.y, args.hidden, args.kernels.data(), args.grad_x,
                               args.grad_kernels.data(), args.grad_biases.data()},
                              fused_mlp_cpu::PoolOf(ctx));
      return absl::OkStatus();
    }
  }
};

// float16 is registered so that it fails with a message saying where it runs.

}  // namespace mo

#endif  // MO_KERNELS_CPU_FUSED_MLP_FUNCTOR_H_
