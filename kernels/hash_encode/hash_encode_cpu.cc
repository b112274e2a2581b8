// HashEncode on the CPU: the TensorFlow kernels of MetalOpsHashEncode /
// MetalOpsHashEncodeGrad / MetalOpsHashEncodeGradGrad (the kernel classes of
// hash_encode.h over the CPU functor below) and MetalOpsHashGridOffsets, and
// XLA's host handlers of the same functor, for the calls hash_encode_xla.cc
// emits. The functor schedules the CPU bodies of hash_encode.h (the
// arithmetic is kernels/common/hash_grid.h's) on the context's thread pool,
// or runs the op's Metal plans where kernels/cpu/metal_offload.h sends the call.
//
// Forward (and the second-order grad_grad_encoded): parallel over blocks of
//   points; inside a block, level by level, so one level's rows stay hot while
//   the block's points gather from it.
// Table gradient: no atomics. Levels are dealt round-robin to K = intra-op
//   threads groups; a group owns whole levels, so its writes are disjoint from
//   every other group's, and it adds the points of a level in index order 0..N-1.
//   The float32 sums are therefore bitwise identical for any thread count and
//   any run. Half tables accumulate into a float32 buffer, cast at the end.
// Input gradient: parallel over points, levels summed in order 0..L-1.
#include "kernels/framework/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <type_traits>

#define MO_CPU_BODIES  // hash_encode.h's CPU bodies
#define MO_TF_KERNEL   // hash_encode.h's kernel classes
#include "kernels/common/hash_grid.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/framework/op_kernel_with_attrs.h"  // before hash_encode.h: its kernel classes
#include "kernels/framework/register_kernels.h"
#include "kernels/hash_encode/hash_encode.h"
#include "kernels/xla/xla_host.h"  // MO_XLA
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace mo {
namespace hash_encode_cpu {

template <int V>
using IntC = std::integral_constant<int, V>;

// Calls fn(IntC<D>, IntC<F>) for the runtime (dims, features); false when the
// pair is unsupported (the callers validate before).
template <typename Fn>
bool DispatchDimsFeatures(int dims, int features, Fn&& fn) {
  auto with_features = [&](auto dims_c) -> bool {
    switch (features) {
      case 1: fn(dims_c, IntC<1>()); return true;
      case 2: fn(dims_c, IntC<2>()); return true;
      case 4: fn(dims_c, IntC<4>()); return true;
      case 8: fn(dims_c, IntC<8>()); return true;
    }
    return false;
  };
  switch (dims) {
    case 1: return with_features(IntC<1>());
    case 2: return with_features(IntC<2>());
    case 3: return with_features(IntC<3>());
    case 4: return with_features(IntC<4>());
  }
  return false;
}

// Runs fn(begin, end) over [0, n) points on the pool.
inline void ForPoints(const cpu::Context& ctx, int64 n, int64 cost_per_point, const cpu::RangeFn& fn) {
  if (n <= 0) return;
  cpu::ParallelFor(ctx, n, cost_per_point, fn);
}

// Table-gradient scatter into acc, then (half tables) the cast into out.
template <int D, int F, typename T, bool kSecondOrder>
void ScatterTable(const cpu::Context& ctx, const float* x, const float* gg, const T* dy, float* acc, T* out, int64 n,
                  const Grid& g) {
  const int groups = std::min(g.num_levels, cpu::NumThreads(ctx));
  auto run_group = [&](int group) {
    ScatterGroup<D, F, T, kSecondOrder>(group, groups, x, gg, dy, acc, n, g);
    if (!std::is_same<T, float>::value) {
      for (int l = group; l < g.num_levels; l += groups) {
        const int64 begin = g.levels[l].offset * F;
        const int64 count = int64(g.levels[l].entries) * F;
        for (int64 k = 0; k < count; ++k) out[begin + k] = static_cast<T>(acc[begin + k]);
      }
    }
  };
  if (groups == 1) {
    run_group(0);
    return;
  }
  cpu::ParallelForBlocks(ctx, groups, [&](int64_t begin, int64_t end) {
    for (int64_t group = begin; group < end; ++group) run_group(int(group));
  });
}

inline int64 GatherCost(int dims, int features, int num_levels) {
  return int64(num_levels) * (int64(1) << dims) * (8 + 2 * features);
}

}  // namespace hash_encode_cpu

// The Metal plans' layout of an encoding (kernels/hash_encode/hash_encode_plan.h).
template <typename Args>
metal_plan::HashEncodeLayout MetalLayout(const Args& a) {
  using T = typename std::remove_const<typename std::remove_pointer<decltype(a.table)>::type>::type;
  return {&a.params, a.dims, a.features, a.rows, cpu::MetalDtype<T>()};
}

template <typename T>
struct HashEncodeFunctor<Eigen::ThreadPoolDevice, T> {
  static absl::Status Forward(cpu::Context ctx, const hash_encode::Attrs& attrs, const HashEncodeForwardArgs<T>& a) {
    const uint64_t table_bytes = uint64_t(a.rows * a.features) * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              a.num_points * attrs.num_levels, [&] { return metal_plan::HashEncodeForward(MetalLayout(a)); },
              {cpu::Slot(a.inputs, uint64_t(a.num_points * a.dims) * sizeof(float)), cpu::Slot(a.table, table_bytes),
               cpu::Slot(a.encoded, uint64_t(a.num_points * attrs.num_levels * a.features) * sizeof(T))});
        },
        [&] {
          using namespace hash_encode_cpu;  // NOLINT: the kernel bodies
          AdviseHugePages(a.table, sizeof(T) * size_t(a.rows * a.features), /*collapse=*/true);
          AdviseHugePages(a.encoded, sizeof(T) * size_t(a.num_points * attrs.num_levels * a.features),
                          /*collapse=*/false);
          DispatchDimsFeatures(a.dims, a.features, [&](auto dc, auto fc) {
            constexpr int kD = decltype(dc)::value;
            constexpr int kF = decltype(fc)::value;
            const Grid g = MakeGrid(a.params);
            ForPoints(ctx, a.num_points, GatherCost(kD, kF, g.num_levels), [&](int64 begin, int64 end) {
              GatherRange<kD, kF, T, false>(a.inputs, nullptr, a.table, a.encoded, begin, end, g);
            });
          });
        });
  }

  // Deterministic always (fixed-order reductions; on Metal the fixed-point
  // plan): a.deterministic changes nothing here.
  static absl::Status Backward(cpu::Context ctx, const hash_encode::GradAttrs& attrs,
                               const HashEncodeBackwardArgs<T>& a) {
    const bool table_grad = a.grad_table != nullptr, input_grad = a.grad_inputs != nullptr;
    const uint64_t table_bytes = uint64_t(a.rows * a.features) * sizeof(T);
    const uint64_t inputs_bytes = uint64_t(a.num_points * a.dims) * sizeof(float);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              a.num_points * attrs.num_levels,
              [&] {
                return metal_plan::HashEncodeBackward(MetalLayout(a), table_grad, input_grad, /*deterministic=*/true);
              },
              {cpu::Slot(a.grad_encoded, uint64_t(a.num_points * attrs.num_levels * a.features) * sizeof(T)),
               cpu::Slot(a.inputs, inputs_bytes), cpu::Slot(a.table, table_bytes),
               cpu::Slot(a.grad_table, table_grad ? table_bytes : 0),
               cpu::Slot(a.grad_inputs, input_grad ? inputs_bytes : 0)});
        },
        [&] { return BackwardOnCpu(ctx, a); });
  }

  // The gradients of <grad_grad_inputs, d inputs> (the input gradient's
  // gradients): the table's (a fixed-order scatter) and grad_encoded's.
  static absl::Status GradGrad(cpu::Context ctx, const HashEncodeGradGradArgs<T>& a) {
    using namespace hash_encode_cpu;  // NOLINT: the kernel bodies
    const int64 table_elements = a.rows * a.features;
    float* acc = nullptr;
    ::tensorflow::Tensor acc_tensor;
    TF_RETURN_IF_ERROR(TableAccumulator(ctx, a.grad_table, table_elements, &acc_tensor, &acc));
    AdviseHugePages(a.table, sizeof(T) * size_t(table_elements), /*collapse=*/true);
    DispatchDimsFeatures(a.dims, a.features, [&](auto dc, auto fc) {
      constexpr int kD = decltype(dc)::value;
      constexpr int kF = decltype(fc)::value;
      const Grid g = MakeGrid(a.params);
      ScatterTable<kD, kF, T, true>(ctx, a.inputs, a.grad_grad_inputs, a.grad_encoded, acc, a.grad_table,
                                    a.num_points, g);
      ForPoints(ctx, a.num_points, 2 * GatherCost(kD, kF, g.num_levels), [&](int64 begin, int64 end) {
        GatherRange<kD, kF, T, true>(a.inputs, a.grad_grad_inputs, a.table, a.grad_grad_encoded, begin, end, g);
      });
    });
    return absl::OkStatus();
  }

 private:
  static absl::Status BackwardOnCpu(const cpu::Context& ctx, const HashEncodeBackwardArgs<T>& a) {
    using namespace hash_encode_cpu;  // NOLINT: the kernel bodies
    const int64 table_elements = a.rows * a.features;
    float* acc = nullptr;
    ::tensorflow::Tensor acc_tensor;
    if (a.grad_table != nullptr) {
      TF_RETURN_IF_ERROR(TableAccumulator(ctx, a.grad_table, table_elements, &acc_tensor, &acc));
    }
    if (a.grad_inputs != nullptr) AdviseHugePages(a.table, sizeof(T) * size_t(table_elements), /*collapse=*/true);
    DispatchDimsFeatures(a.dims, a.features, [&](auto dc, auto fc) {
      constexpr int kD = decltype(dc)::value;
      constexpr int kF = decltype(fc)::value;
      const Grid g = MakeGrid(a.params);
      if (a.grad_table != nullptr) {
        ScatterTable<kD, kF, T, false>(ctx, a.inputs, nullptr, a.grad_encoded, acc, a.grad_table, a.num_points, g);
      }
      if (a.grad_inputs != nullptr) {
        ForPoints(ctx, a.num_points, 2 * GatherCost(kD, kF, g.num_levels), [&](int64 begin, int64 end) {
          InputGradRange<kD, kF, T>(a.inputs, a.table, a.grad_encoded, a.grad_inputs, begin, end, g);
        });
      }
    });
    return absl::OkStatus();
  }

  // Where a table gradient of `elements` values is summed, in float32: the
  // gradient itself when T is float, else *temp; huge pages advised.
  static absl::Status TableAccumulator(cpu::Context ctx, T* grad_table, int64 elements, ::tensorflow::Tensor* temp,
                                       float** acc) {
    if (std::is_same<T, float>::value) {
      *acc = reinterpret_cast<float*>(grad_table);
    } else {
      TF_RETURN_IF_ERROR(ctx.AllocateTemp(::tensorflow::DT_FLOAT, ::tensorflow::TensorShape({elements}), temp));
      *acc = temp->flat<float>().data();
    }
    AdviseHugePages(*acc, sizeof(float) * size_t(elements), /*collapse=*/false);
    return absl::OkStatus();
  }
};

using CPUDevice = Eigen::ThreadPoolDevice;

MO_HASH_ENCODE_REGISTER_KERNELS(DEVICE_CPU, CPUDevice);

namespace {

using ::mo::int64;
using ::mo::uint32;
using namespace ::mo::hash_encode_cpu;  // NOLINT: the kernel bodies
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;
using ::tensorflow::register_kernel::Name;

using ::mo::hash_encode::GridRows;

// ---- MetalOpsHashGridOffsets, on the CPU only (the others' kernel classes: hash_encode.h) --------

class HashGridOffsetsOp : public OpKernelWithAttrs<hash_encode::OffsetsAttrs> {
 public:
  using OpKernelWithAttrs<hash_encode::OffsetsAttrs>::OpKernelWithAttrs;

  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({attrs_.num_levels + 1}), &out));
    int64 offsets[hash_grid::kMaxLevels + 1];
    GridRows(attrs_.input_dim, attrs_, offsets);
    auto o = out->flat<int64_t>();
    for (int l = 0; l <= attrs_.num_levels; ++l) o(l) = offsets[l];
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsHashGridOffsets").Device(DEVICE_CPU), HashGridOffsetsOp);

}  // namespace
}  // namespace mo

#if MO_XLA
#include "kernels/xla/xla_ffi_attrs.h"

MO_XLA_FFI_ATTRS(::mo::hash_encode::Attrs);
MO_XLA_FFI_ATTRS(::mo::hash_encode::GradAttrs);

// XLA's host handlers of the same functor, for the calls hash_encode_xla.cc
// emits: the attributes bound whole (kernels/xla/xla_ffi_attrs.h).
namespace mo::xla_kernels {
namespace {

using hash_encode::Attrs;
using hash_encode::GradAttrs;
using hash_encode::TableGeometry;

// A functor's arguments (HashEncodeForwardArgs, HashEncodeBackwardArgs,
// HashEncodeGradGradArgs): the call's sizes, the buffers in the struct's
// order, then the grid's geometry.
template <template <typename> class Args, typename T, typename... Buffers>
Args<T> XlaArgsOf(const TableGeometry& g, Buffers... buffers) {
  return {g.dims, g.features, g.params.num_points, g.rows, buffers..., g.params};
}

ffi::Error XlaForward(ffi::AnyBuffer inputs, ffi::AnyBuffer table, RetBuffer encoded, Attrs a) {
  TableGeometry g;
  ffi::Error error = xla_ffi::ToError(InputsAndTable(a, xla_ffi::DimsOf(inputs), xla_ffi::DimsOf(table), &g));
  if (error.failure() || g.params.num_points == 0) return error;
  return xla_ffi::ForType<float, Eigen::half>(table.element_type(), "HashEncode", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::Forward(
        HostContext(), a,
        XlaArgsOf<HashEncodeForwardArgs, T>(g, Data<float>(inputs), Data<T>(table), Data<T>(encoded))));
  });
}

ffi::Error XlaBackward(ffi::AnyBuffer grad_encoded, ffi::AnyBuffer inputs, ffi::AnyBuffer table,
                       RetBuffer grad_table, RetBuffer grad_inputs, GradAttrs a) {
  TableGeometry g;
  ffi::Error error = xla_ffi::ToError(InputsAndTable(a, xla_ffi::DimsOf(inputs), xla_ffi::DimsOf(table), &g));
  if (error.failure() || (!a.compute_table_grad && !a.compute_input_grad)) return error;
  return xla_ffi::ForType<float, Eigen::half>(table.element_type(), "HashEncodeGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::Backward(
        HostContext(), a,
        XlaArgsOf<HashEncodeBackwardArgs, T>(g, Data<T>(grad_encoded), Data<float>(inputs), Data<T>(table),
                                             a.compute_table_grad ? Data<T>(grad_table) : nullptr,
                                             a.compute_input_grad ? Data<float>(grad_inputs) : nullptr,
                                             a.deterministic)));
  });
}

ffi::Error XlaGradGrad(ffi::AnyBuffer grad_grad_inputs, ffi::AnyBuffer grad_encoded, ffi::AnyBuffer inputs,
                       ffi::AnyBuffer table, RetBuffer grad_table, RetBuffer grad_grad_encoded, Attrs a) {
  TableGeometry g;
  ffi::Error error = xla_ffi::ToError(InputsAndTable(a, xla_ffi::DimsOf(inputs), xla_ffi::DimsOf(table), &g));
  if (error.failure()) return error;
  return xla_ffi::ForType<float, Eigen::half>(table.element_type(), "HashEncodeGradGrad", [&](auto type) {
    using T = decltype(type);
    return xla_ffi::ToError(HashEncodeFunctor<Eigen::ThreadPoolDevice, T>::GradGrad(
        HostContext(),
        XlaArgsOf<HashEncodeGradGradArgs, T>(g, Data<float>(grad_grad_inputs), Data<T>(grad_encoded),
                                             Data<float>(inputs), Data<T>(table), Data<T>(grad_table),
                                             Data<T>(grad_grad_encoded))));
  });
}

MO_XLA_FFI_HANDLER("MetalOpsHashEncode", "Host", XlaForward, xla_ffi::BindBuffers<2, 1>().Attrs<Attrs>());
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGrad", "Host", XlaBackward, xla_ffi::BindBuffers<3, 2>().Attrs<GradAttrs>());
MO_XLA_FFI_HANDLER("MetalOpsHashEncodeGradGrad", "Host", XlaGradGrad, xla_ffi::BindBuffers<4, 2>().Attrs<Attrs>());

}  // namespace
}  // namespace mo::xla_kernels
#endif  // MO_XLA
