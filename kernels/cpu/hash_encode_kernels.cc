// CPU kernels of the multiresolution hash encoding (C++ API, TF's intra-op
// thread pool). The arithmetic is kernels/common/hash_grid.h; this file only
// schedules it.
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
//
// MetalOpsHashEncodeGradGrad and MetalOpsHashGridOffsets run on the CPU only:
// their kernel classes live here, beside their registration, not in
// kernels/hash_encode_kernel.h (which holds the classes shared by devices).
#include "kernels/tf_eigen.h"  // first: silences a warning in TensorFlow's headers

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/hash_grid.h"
#include "kernels/cpu/hash_encode_cpu.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/metal_offload.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash_encode_kernel.h"
#include "kernels/metal_plan/hash_encode_plan.h"
#include "kernels/register_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace mo {
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

// ---- Attributes -------------------------------------------------------------------

using ::mo::hash_encode::CheckInputsAndTable;
using ::mo::hash_encode::CheckMatrix;
using ::mo::hash_encode::GridAttrs;
using ::mo::hash_encode::GridRows;

// ---- Threading helpers ------------------------------------------------------------------

// Runs fn(begin, end) over [0, n) points on the pool.
void ForPoints(OpKernelContext* ctx, int64 n, int64 cost_per_point, const cpu::RangeFn& fn) {
  if (n <= 0) return;
  cpu::ParallelFor(ctx, n, cost_per_point, fn);
}

// Table-gradient scatter into acc, then (half tables) the cast into out.
template <int D, int F, typename T, bool kSecondOrder>
void ScatterTable(OpKernelContext* ctx, const float* x, const float* gg, const T* dy, float* acc, T* out, int64 n,
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

int64 GatherCost(int dims, int features, int num_levels) {
  return int64(num_levels) * (int64(1) << dims) * (8 + 2 * features);
}

// ---- Kernels ----------------------------------------------------------------------------------

template <typename T>
class HashEncodeGradGradOp : public hash_encode::KernelOf<hash_encode::GridOp::kEncodeGradGrad> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kEncodeGradGrad>::OpKernelWithAttrs;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ggx = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    const Tensor& inputs = ctx->input(2);
    const Tensor& table = ctx->input(3);
    int dims = 0, features = 0;
    int64 rows = 0;
    hash_grid::Params params;
    OP_REQUIRES_OK(ctx, CheckInputsAndTable(attrs_.grid, inputs, table, &dims, &features, &rows, &params));
    const int64 n = inputs.dim_size(0);
    OP_REQUIRES_OK(ctx, CheckMatrix("grad_grad_inputs", ggx, n, dims));
    OP_REQUIRES_OK(ctx, CheckMatrix("grad_encoded", dy, n, int64(attrs_.grid.num_levels) * features));
    Tensor* grad_table = nullptr;
    Tensor* grad_dy = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, table.shape(), &grad_table));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, dy.shape(), &grad_dy));
    const float* x = inputs.flat<float>().data();
    const float* gg = ggx.flat<float>().data();
    const T* tab = table.flat<T>().data();
    const T* g_out = dy.flat<T>().data();
    float* acc = nullptr;
    Tensor acc_tensor;
    if (std::is_same<T, float>::value) {
      acc = reinterpret_cast<float*>(grad_table->flat<T>().data());
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({table.NumElements()}), &acc_tensor));
      acc = acc_tensor.flat<float>().data();
    }
    AdviseHugePages(acc, sizeof(float) * size_t(table.NumElements()), /*collapse=*/false);
    AdviseHugePages(tab, table.TotalBytes(), /*collapse=*/true);
    DispatchDimsFeatures(dims, features, [&](auto dc, auto fc) {
      constexpr int kD = decltype(dc)::value;
      constexpr int kF = decltype(fc)::value;
      const Grid g = MakeGrid(params);
      ScatterTable<kD, kF, T, true>(ctx, x, gg, g_out, acc, grad_table->flat<T>().data(), n, g);
      T* o = grad_dy->flat<T>().data();
      ForPoints(ctx, n, 2 * GatherCost(kD, kF, g.num_levels), [&](int64 begin, int64 end) {
        GatherRange<kD, kF, T, true>(x, gg, tab, o, begin, end, g);
      });
    });
  }
};

class HashGridOffsetsOp : public hash_encode::KernelOf<hash_encode::GridOp::kOffsets> {
 public:
  using hash_encode::KernelOf<hash_encode::GridOp::kOffsets>::OpKernelWithAttrs;

  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({attrs_.grid.num_levels + 1}), &out));
    int64 offsets[hash_grid::kMaxLevels + 1];
    GridRows(attrs_.input_dim, attrs_.grid, offsets);
    auto o = out->flat<int64_t>();
    for (int l = 0; l <= attrs_.grid.num_levels; ++l) o(l) = offsets[l];
  }
};

REGISTER_KERNEL_BUILDER(Name("MetalOpsHashGridOffsets").Device(DEVICE_CPU), HashGridOffsetsOp);

}  // namespace

using CPUDevice = Eigen::ThreadPoolDevice;

// The Metal plans' layout of an encoding (kernels/metal_plan/hash_encode_plan.h).
template <typename Args>
metal_plan::HashEncodeLayout MetalLayout(const Args& a) {
  using T = typename std::remove_const<typename std::remove_pointer<decltype(a.table)>::type>::type;
  return {&a.params, a.dims, a.features, a.rows, cpu::MetalDtype<T>()};
}

template <typename T>
struct HashEncodeFunctor<CPUDevice, T> {
  static absl::Status Forward(OpKernelContext* ctx, const GridAttrs& grid, const HashEncodeForwardArgs<T>& a) {
    absl::Status status;
    const uint64_t table_bytes = uint64_t(a.rows * a.features) * sizeof(T);
    if (cpu::RunOnMetal(ctx, a.num_points * grid.num_levels, [&] { return metal_plan::HashEncodeForward(MetalLayout(a)); },
                        {cpu::Slot(a.inputs, uint64_t(a.num_points * a.dims) * sizeof(float)),
                         cpu::Slot(a.table, table_bytes),
                         cpu::Slot(a.encoded, uint64_t(a.num_points * grid.num_levels * a.features) * sizeof(T))},
                        &status)) {
      return status;
    }
    AdviseHugePages(a.table, sizeof(T) * size_t(a.rows * a.features), /*collapse=*/true);
    AdviseHugePages(a.encoded, sizeof(T) * size_t(a.num_points * grid.num_levels * a.features), /*collapse=*/false);
    DispatchDimsFeatures(a.dims, a.features, [&](auto dc, auto fc) {
      constexpr int kD = decltype(dc)::value;
      constexpr int kF = decltype(fc)::value;
      const Grid g = MakeGrid(a.params);
      ForPoints(ctx, a.num_points, GatherCost(kD, kF, g.num_levels), [&](int64 begin, int64 end) {
        GatherRange<kD, kF, T, false>(a.inputs, nullptr, a.table, a.encoded, begin, end, g);
      });
    });
    return absl::OkStatus();
  }

  // Deterministic always (fixed-order reductions): a.deterministic changes nothing here.
  static absl::Status Backward(OpKernelContext* ctx, const GridAttrs& grid, const HashEncodeBackwardArgs<T>& a) {
    const int64 table_elements = a.rows * a.features;
    absl::Status status;
    const bool table_grad = a.grad_table != nullptr, input_grad = a.grad_inputs != nullptr;
    const uint64_t table_bytes = uint64_t(table_elements) * sizeof(T);
    const uint64_t inputs_bytes = uint64_t(a.num_points * a.dims) * sizeof(float);
    if (cpu::RunOnMetal(
            ctx, a.num_points * grid.num_levels,
            [&] { return metal_plan::HashEncodeBackward(MetalLayout(a), table_grad, input_grad, a.deterministic); },
            {cpu::Slot(a.grad_encoded, uint64_t(a.num_points * grid.num_levels * a.features) * sizeof(T)),
             cpu::Slot(a.inputs, inputs_bytes), cpu::Slot(a.table, table_bytes),
             cpu::Slot(a.grad_table, table_grad ? table_bytes : 0), cpu::Slot(a.grad_inputs, input_grad ? inputs_bytes : 0)},
            &status)) {
      return status;
    }
    float* acc = nullptr;
    Tensor acc_tensor;
    if (a.grad_table != nullptr) {
      if (std::is_same<T, float>::value) {
        acc = reinterpret_cast<float*>(a.grad_table);
      } else {
        TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({table_elements}), &acc_tensor));
        acc = acc_tensor.flat<float>().data();
      }
      AdviseHugePages(acc, sizeof(float) * size_t(table_elements), /*collapse=*/false);
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
};

MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE_CPU, CPUDevice, float);
MO_REGISTER_WITH_GRAD("MetalOpsHashEncode", HashEncode, DEVICE_CPU, CPUDevice, Eigen::half);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_CPU, float, HashEncodeGradGradOp<float>);
MO_REGISTER("MetalOpsHashEncodeGradGrad", DEVICE_CPU, Eigen::half, HashEncodeGradGradOp<Eigen::half>);

}  // namespace mo
