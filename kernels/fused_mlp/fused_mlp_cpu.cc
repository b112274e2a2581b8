// FusedMLP on the CPU: the TensorFlow kernels of MetalOpsFusedMLP /
// MetalOpsFusedMLPGrad (fused_mlp.h's kernel classes over the CPU functor
// below) and XLA's host handlers of the same functor, for the calls
// fused_mlp_xla.cc emits. The functor runs the CPU bodies of fused_mlp.h
// (MO_CPU_BODIES) over the context's pool, float32 only; the op's Metal plans
// (fused_mlp_metal.cc) run where kernels/cpu/metal_offload.h sends the call;
// outputs the graph does not consume are temporaries there (the shaders write
// them).
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/framework/op_kernel_with_attrs.h"
#include "kernels/framework/register_kernels.h"
#include "kernels/spec/checks_tf.h"
#include "kernels/xla/xla_host.h"  // MO_XLA; kernels/xla/xla_ffi.h where it is 1
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/errors.h"

#define MO_CPU_BODIES  // fused_mlp.h's CPU bodies
#define MO_TF_KERNEL   // fused_mlp.h's kernel classes (their headers are above)
#include "kernels/fused_mlp/fused_mlp.h"

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

// The Metal geometry of a call of `work` elements: 4 SIMD-groups per
// threadgroup, or fewer where the route's row-tile pipeline runs fewer threads
// per threadgroup (maxTotalThreadsPerThreadgroup, as tensorflow-metal's glue
// does); where not even one fits, that of 4, whose run then names the
// pipeline's limit as the reason the CPU computes (false: no geometry fits,
// which no valid network hits; the CPU computes).
inline bool MetalParams(const cpu::MetalRoute& metal, int64_t work, const fused_mlp::Net& net, int64_t n,
                        const fused_mlp::Attrs& a, bool backward, FusedMlpParams* p) {
  const auto params = [&](int64_t max_threads) {
    return fused_mlp_params(n, int32(net.in_dim), int32(net.width), int32(net.out_dim), net.hidden_layers,
                            a.activation, a.output_activation, a.leaky_relu_alpha, int32(sizeof(float)), backward, p,
                            max_threads);
  };
  const int64_t full = 4 * MO_FUSED_MLP_SIMD_WIDTH;
  if (metal.Takes(work)) {
    const int64_t limit = int64_t(metal.ThreadLimit(
        "fused_mlp", metal_plan::FusedMlpTileShader(int(net.width), backward, metal_plan::Dtype::kFloat32), true));
    if (limit > 0 && limit < full && params(limit)) return true;
  }
  return params(full);
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
  const int64_t n = args.n, work = n * net.width;
  FusedMlpParams p;
  if (!MetalParams(metal, work, net, n, a, false, &p)) return std::nullopt;
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
  const int64_t n = args.n, work = n * net.width;
  FusedMlpParams p;
  if (!MetalParams(metal, work, net, n, a, true, &p)) return std::nullopt;
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

}  // namespace mo

MO_REGISTER_CPU_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, float);
MO_REGISTER_CPU_WITH_GRAD("MetalOpsFusedMLP", FusedMlp, Eigen::half);  // fails saying where float16 runs

#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"

MO_XLA_FFI_ATTRS(::mo::fused_mlp::Attrs);

// XLA's host handlers of the same functor, for the calls fused_mlp_xla.cc emits.
namespace mo::xla_kernels {
namespace {

ffi::Error Forward(ffi::RemainingArgs args, ffi::RemainingRets rets, fused_mlp::Attrs attrs) {
  xla_ffi::FusedMlpCall c;
  ffi::Error error = xla_ffi::FusedMlpForwardOf(args, rets, attrs, &c);
  if (error.failure()) return error;
  const std::vector<ffi::AnyBuffer>& in = c.in;
  return xla_ffi::ForType<float, Eigen::half>(in[0].element_type(), "FusedMLP", [&](auto type) {
    using T = decltype(type);
    FusedMlpForwardArgs<T> a{static_cast<int64_t>(in[0].dimensions()[0]), Data<T>(in[0]), {}, {}, Data<T>(c.out[0]),
                             Data<T>(c.out[1])};
    for (int l = 0; l < c.num; ++l) {
      a.kernels.push_back(Data<T>(in[1 + l]));
      a.biases.push_back(Data<T>(in[1 + c.num + l]));
    }
    return xla_ffi::ToError(FusedMlpFunctor<Eigen::ThreadPoolDevice, T>::Forward(HostContext(), c.net, c.attrs, a));
  });
}

ffi::Error Backward(ffi::RemainingArgs args, ffi::RemainingRets rets, fused_mlp::Attrs attrs) {
  xla_ffi::FusedMlpCall c;
  ffi::Error error = xla_ffi::FusedMlpBackwardOf(args, rets, attrs, &c);
  if (error.failure()) return error;
  const std::vector<ffi::AnyBuffer>& in = c.in;
  const int num = c.num;
  return xla_ffi::ForType<float, Eigen::half>(in[1].element_type(), "FusedMLPGrad", [&](auto type) {
    using T = decltype(type);
    FusedMlpBackwardArgs<T> a{static_cast<int64_t>(in[1].dimensions()[0]),
                              Data<T>(in[0]),
                              Data<T>(in[1]),
                              Data<T>(in[2 + num]),
                              Data<T>(in[3 + num]),
                              {},
                              Data<T>(c.out[0]),
                              {},
                              {}};
    for (int l = 0; l < num; ++l) {
      a.kernels.push_back(Data<T>(in[2 + l]));
      a.grad_kernels.push_back(Data<T>(c.out[1 + l]));
      a.grad_biases.push_back(Data<T>(c.out[1 + num + l]));
    }
    return xla_ffi::ToError(FusedMlpFunctor<Eigen::ThreadPoolDevice, T>::Backward(HostContext(), c.net, c.attrs, a));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsFusedMLP", "Host", Forward, xla_ffi::BindFusedMlp(ffi::Ffi::Bind()));
MO_XLA_FFI_HANDLER("MetalOpsFusedMLPGrad", "Host", Backward, xla_ffi::BindFusedMlp(ffi::Ffi::Bind()));

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
