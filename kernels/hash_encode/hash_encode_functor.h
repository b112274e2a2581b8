// The CPU functor of MetalOpsHashEncode / MetalOpsHashEncodeGrad /
// MetalOpsHashEncodeGradGrad, run by the TensorFlow kernels
// (kernels/hash_encode/hash_encode_kernels.cc, kernel classes
// kernels/hash_encode/hash_encode_kernel.h) and the XLA host handlers
// (kernels/hash_encode/hash_encode_xla.cc), with its scheduling helpers, on
// the context's thread pool. The arithmetic is kernels/common/hash_grid.h, the
// kernel bodies kernels/hash_encode/hash_encode_cpu.h; this file schedules them
// and supplies the op's Metal plans, run where kernels/cpu/metal_offload.h
// sends the call.
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
#ifndef MO_KERNELS_HASH_ENCODE_HASH_ENCODE_FUNCTOR_H_
#define MO_KERNELS_HASH_ENCODE_HASH_ENCODE_FUNCTOR_H_

#include "kernels/hash_encode/hash_encode_cpu.h"  // first: it includes the intrinsics headers
#include "kernels/framework/tf_eigen.h"  // next: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/hash_encode/hash_encode_kernel.h"
#include "kernels/hash_encode/hash_encode_plan.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

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
  static absl::Status Forward(cpu::Context ctx, const hash_encode::GridAttrs& grid, const HashEncodeForwardArgs<T>& a) {
    const uint64_t table_bytes = uint64_t(a.rows * a.features) * sizeof(T);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              a.num_points * grid.num_levels, [&] { return metal_plan::HashEncodeForward(MetalLayout(a)); },
              {cpu::Slot(a.inputs, uint64_t(a.num_points * a.dims) * sizeof(float)), cpu::Slot(a.table, table_bytes),
               cpu::Slot(a.encoded, uint64_t(a.num_points * grid.num_levels * a.features) * sizeof(T))});
        },
        [&] {
          using namespace hash_encode_cpu;  // NOLINT: the kernel bodies
          AdviseHugePages(a.table, sizeof(T) * size_t(a.rows * a.features), /*collapse=*/true);
          AdviseHugePages(a.encoded, sizeof(T) * size_t(a.num_points * grid.num_levels * a.features),
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
  static absl::Status Backward(cpu::Context ctx, const hash_encode::GridAttrs& grid, const HashEncodeBackwardArgs<T>& a) {
    const bool table_grad = a.grad_table != nullptr, input_grad = a.grad_inputs != nullptr;
    const uint64_t table_bytes = uint64_t(a.rows * a.features) * sizeof(T);
    const uint64_t inputs_bytes = uint64_t(a.num_points * a.dims) * sizeof(float);
    return cpu::MetalOrCpu(
        ctx,
        [&](const cpu::MetalRoute& metal) {
          return metal.Run(
              a.num_points * grid.num_levels,
              [&] {
                return metal_plan::HashEncodeBackward(MetalLayout(a), table_grad, input_grad, /*deterministic=*/true);
              },
              {cpu::Slot(a.grad_encoded, uint64_t(a.num_points * grid.num_levels * a.features) * sizeof(T)),
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

}  // namespace mo

#endif  // MO_KERNELS_HASH_ENCODE_HASH_ENCODE_FUNCTOR_H_
