// CPU kernels of MetalOpsFusedMLP / MetalOpsFusedMLPGrad: the functor of
// kernels/fused_mlp_kernel.h's kernel class, on TF's intra-op pool. The work is
// kernels/cpu/fused_mlp_cpu.h (TensorFlow-free: blocks of rows through every
// layer, a register-tiled micro-kernel, deterministic weight gradients).
#include "kernels/cpu/fused_mlp_cpu.h"  // first: it includes the intrinsics headers (simd.h)
#include "kernels/tf_eigen.h"  // next: silences a warning in TensorFlow's headers

#include <cstdint>
#include <functional>
#include <type_traits>

#include "kernels/cpu/thread_pool.h"
#include "kernels/fused_mlp_kernel.h"
#include "kernels/register_kernels.h"
#include "kernels/spec/fused_mlp_spec.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace mo {
namespace {

fused_mlp_cpu::Shape ShapeOf(const fused_mlp::Net& net, int64_t n, const fused_mlp::Attrs& a) {
  return {n, static_cast<int>(net.in_dim), static_cast<int>(net.width), net.hidden_layers,
          static_cast<int>(net.out_dim), a.activation, a.output_activation, a.leaky_relu_alpha};
}

// fused_mlp_cpu's parallel-for on the op's intra-op pool, one unit per shard.
auto PoolOf(::tensorflow::OpKernelContext* ctx) {
  return [ctx](int64_t units, const std::function<void(int64_t, int64_t)>& fn) {
    cpu::ParallelForBlocks(ctx, units, fn);
  };
}

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

template <typename T>
struct FusedMlpFunctor<CPUDevice, T> {
  static absl::Status Float16OnGpus() {
    return ::tensorflow::errors::InvalidArgument(
        "FusedMLP: float16 runs on GPUs (CUDA, Metal); on the CPU use float32 'x', 'kernels' and 'biases'");
  }

  static absl::Status Forward(::tensorflow::OpKernelContext* ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                              const FusedMlpForwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      fused_mlp_cpu::Forward(ShapeOf(net, args.n, a),
                             {args.x, args.kernels.data(), args.biases.data(), args.y, args.hidden}, PoolOf(ctx));
      return absl::OkStatus();
    }
  }

  static absl::Status Backward(::tensorflow::OpKernelContext* ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                               const FusedMlpBackwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      fused_mlp_cpu::Backward(ShapeOf(net, args.n, a),
                              {args.grad_y, args.x, args.y, args.hidden, args.kernels.data(), args.grad_x,
                               args.grad_kernels.data(), args.grad_biases.data()},
                              PoolOf(ctx));
      return absl::OkStatus();
    }
  }
};

// float16 is registered so that it fails with a message saying where it runs.
MO_REGISTER_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, DEVICE_CPU, CPUDevice, Eigen::half);

}  // namespace mo
