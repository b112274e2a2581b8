// The CPU functor of MetalOpsFusedMLP / MetalOpsFusedMLPGrad, run by the
// TensorFlow kernels (kernels/fused_mlp/fused_mlp_kernels.cc, kernel class
// kernels/fused_mlp/fused_mlp_kernel.h) and the XLA host handler
// (kernels/fused_mlp/fused_mlp_xla.cc): kernels/fused_mlp/fused_mlp_cpu.h's blocks over
// the context's pool. float32 only on the CPU. The op's Metal plans
// (kernels/fused_mlp/fused_mlp_plan.h) run where kernels/cpu/metal_offload.h
// sends the call; outputs the graph does not consume are temporaries there
// (the shaders write them).
#ifndef MO_KERNELS_FUSED_MLP_FUSED_MLP_FUNCTOR_H_
#define MO_KERNELS_FUSED_MLP_FUSED_MLP_FUNCTOR_H_

#include "kernels/fused_mlp/fused_mlp_cpu.h"  // first: it includes the intrinsics headers (simd.h)
#include "kernels/framework/tf_eigen.h"  // next: silences a warning in TensorFlow's headers

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/fused_mlp/fused_mlp.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/fused_mlp/fused_mlp_kernel.h"
#include "kernels/fused_mlp/fused_mlp_plan.h"
#include "kernels/fused_mlp/fused_mlp_spec.h"
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

// The Metal geometry of a call (false: no geometry fits, which no valid
// network hits; the CPU computes).
inline bool MetalParams(const fused_mlp::Net& net, int64_t n, const fused_mlp::Attrs& a, bool backward,
                        FusedMlpParams* p) {
  return fused_mlp_params(n, int32(net.in_dim), int32(net.width), int32(net.out_dim), net.hidden_layers, a.activation,
                          a.output_activation, a.leaky_relu_alpha, int32(sizeof(float)), backward, p);
}

// The layers' shapes: layer l's kernel [Rows(l), Cols(l)], its bias [Cols(l)].
struct Layers {
  const fused_mlp::Net& net;
  int64_t Count() const { return net.hidden_layers + 1; }
  int64_t Rows(int64_t l) const { return l == 0 ? net.in_dim : net.width; }
  int64_t Cols(int64_t l) const { return l == Count() - 1 ? net.out_dim : net.width; }
};

// One Metal slot per layer: data[l], the layer's kernel (or bias) in float32.
template <typename P>
void AppendLayerSlots(const Layers& layers, const std::vector<P*>& data, bool kernels,
                      std::vector<metal_plan::HostTensor>* slots) {
  for (int64_t l = 0; l < layers.Count(); ++l) {
    const int64_t elements = (kernels ? layers.Rows(l) : 1) * layers.Cols(l);
    slots->push_back(cpu::Slot(data[size_t(l)], uint64_t(elements) * sizeof(float)));
  }
}

// `data`, or a temporary of `elements` floats when the output is not wanted.
inline absl::Status Wanted(::tensorflow::OpKernelContext* ctx, float* data, int64_t elements,
                           std::vector<::tensorflow::Tensor>* temps, float** out) {
  *out = data;
  if (data != nullptr || elements == 0) return absl::OkStatus();
  temps->emplace_back();
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_FLOAT, ::tensorflow::TensorShape({elements}), &temps->back()));
  *out = temps->back().flat<float>().data();
  return absl::OkStatus();
}

inline cpu::OnMetal ForwardOnMetal(const cpu::MetalRoute& metal, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                                   const FusedMlpForwardArgs<float>& args) {
  FusedMlpParams p;
  if (!MetalParams(net, args.n, a, false, &p)) return std::nullopt;
  const int64_t n = args.n, work = n * net.width;
  const uint64_t f = sizeof(float);
  const Layers layers{net};
  const int64_t hidden_elements = int64_t(net.hidden_layers) * n * net.width;
  std::vector<::tensorflow::Tensor> temps;
  float* hidden = args.hidden;
  if (metal.Takes(work)) {
    const absl::Status status = Wanted(metal.op_context(), args.hidden, hidden_elements, &temps, &hidden);
    if (!status.ok()) return status;
  }
  std::vector<metal_plan::HostTensor> s = {cpu::Slot(args.x, uint64_t(n * net.in_dim) * f)};
  AppendLayerSlots(layers, args.kernels, true, &s);
  AppendLayerSlots(layers, args.biases, false, &s);
  s.push_back(cpu::Slot(args.y, uint64_t(n * net.out_dim) * f));
  s.push_back(cpu::Slot(hidden, uint64_t(hidden_elements) * f));
  return metal.Run(work, [&] { return metal_plan::FusedMlpForward(p, metal_plan::Dtype::kFloat32); }, s);
}

inline cpu::OnMetal BackwardOnMetal(const cpu::MetalRoute& metal, const fused_mlp::Net& net,
                                    const fused_mlp::Attrs& a, const FusedMlpBackwardArgs<float>& args) {
  FusedMlpParams p;
  if (!MetalParams(net, args.n, a, true, &p)) return std::nullopt;
  const int64_t n = args.n, work = n * net.width;
  const uint64_t f = sizeof(float);
  const Layers layers{net};
  std::vector<::tensorflow::Tensor> temps;
  float* dx = args.grad_x;
  std::vector<float*> dk(args.grad_kernels), db(args.grad_biases);
  if (metal.Takes(work)) {
    // The shaders write every gradient: temporaries for those not wanted.
    ::tensorflow::OpKernelContext* ctx = metal.op_context();
    absl::Status status = Wanted(ctx, args.grad_x, n * net.in_dim, &temps, &dx);
    for (int64_t l = 0; l < layers.Count() && status.ok(); ++l) {
      status = Wanted(ctx, args.grad_kernels[size_t(l)], layers.Rows(l) * layers.Cols(l), &temps, &dk[size_t(l)]);
      if (status.ok()) status = Wanted(ctx, args.grad_biases[size_t(l)], layers.Cols(l), &temps, &db[size_t(l)]);
    }
    if (!status.ok()) return status;
  }
  std::vector<metal_plan::HostTensor> s = {cpu::Slot(args.grad_y, uint64_t(n * net.out_dim) * f),
                                           cpu::Slot(args.x, uint64_t(n * net.in_dim) * f)};
  AppendLayerSlots(layers, args.kernels, true, &s);
  s.push_back(cpu::Slot(args.y, uint64_t(n * net.out_dim) * f));
  s.push_back(cpu::Slot(args.hidden, uint64_t(int64_t(net.hidden_layers) * n * net.width) * f));
  s.push_back(cpu::Slot(dx, uint64_t(n * net.in_dim) * f));
  AppendLayerSlots(layers, dk, true, &s);
  AppendLayerSlots(layers, db, false, &s);
  return metal.Run(work, [&] { return metal_plan::FusedMlpBackward(p, metal_plan::Dtype::kFloat32); }, s);
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
      return cpu::MetalOrCpu(
          ctx, [&](const cpu::MetalRoute& metal) { return fused_mlp_cpu::ForwardOnMetal(metal, net, a, args); },
          [&] {
            fused_mlp_cpu::Forward(fused_mlp_cpu::ShapeOf(net, args.n, a),
                                   {args.x, args.kernels.data(), args.biases.data(), args.y, args.hidden},
                                   fused_mlp_cpu::PoolOf(ctx));
          });
    }
  }

  static absl::Status Backward(cpu::Context ctx, const fused_mlp::Net& net, const fused_mlp::Attrs& a,
                               const FusedMlpBackwardArgs<T>& args) {
    if constexpr (!std::is_same<T, float>::value) {
      return Float16OnGpus();
    } else {
      return cpu::MetalOrCpu(
          ctx, [&](const cpu::MetalRoute& metal) { return fused_mlp_cpu::BackwardOnMetal(metal, net, a, args); },
          [&] {
            fused_mlp_cpu::Backward(fused_mlp_cpu::ShapeOf(net, args.n, a),
                                    {args.grad_y, args.x, args.y, args.hidden, args.kernels.data(), args.grad_x,
                                     args.grad_kernels.data(), args.grad_biases.data()},
                                    fused_mlp_cpu::PoolOf(ctx));
          });
    }
  }
};

// float16 is registered so that it fails with a message saying where it runs.

}  // namespace mo

#endif  // MO_KERNELS_FUSED_MLP_FUSED_MLP_FUNCTOR_H_
