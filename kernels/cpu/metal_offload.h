// Where a CPU functor's call runs: on a Metal route (kernels/metal_plan/
// executor.h) or on the CPU, decided here and nowhere else. An op's CPU
// functor supplies its two pieces for each call, its Metal plan and its CPU
// loops, and MetalOrCpu runs one of them:
//
//   return cpu::MetalOrCpu(
//       ctx, [&](const cpu::MetalRoute& metal) {
//         return metal.Run(n, [&] { return metal_plan::TruncExpForward(dtype, n); }, {cpu::Slot(x, bytes), ...});
//       },
//       [&] { cpu::ParallelFor(ctx, n, cycles, ...); });
//
// No device string for the user: the ops stay on TensorFlow's CPU device.
#ifndef MO_KERNELS_CPU_METAL_OFFLOAD_H_
#define MO_KERNELS_CPU_METAL_OFFLOAD_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_context.h"
#include "kernels/metal_plan/executor.h"
#include "kernels/metal_plan/plan.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/logging.h"

namespace mo {
namespace cpu {

// Whether the Metal shaders have T (MSL has no double; bfloat needs Metal 3.1
// and has no shaders here), and the plan's element type for it.
template <typename T>
constexpr bool kHasMetalDtype = std::is_same<T, float>::value || std::is_same<T, Eigen::half>::value ||
                                std::is_same<T, int32_t>::value || std::is_same<T, int64_t>::value;
template <typename T>
metal_plan::Dtype MetalDtype() {
  static_assert(kHasMetalDtype<T>, "no Metal shader for this type");
  if (std::is_same<T, int32_t>::value) return metal_plan::Dtype::kInt32;
  if (std::is_same<T, int64_t>::value) return metal_plan::Dtype::kInt64;
  if (std::is_same<T, Eigen::half>::value) return metal_plan::Dtype::kFloat16;
  return metal_plan::Dtype::kFloat32;
}

// A tensor slot: the data and byte size of a host tensor (const for inputs).
inline metal_plan::HostTensor Slot(const void* data, uint64_t bytes) {
  return {const_cast<void*>(data), bytes};
}
inline metal_plan::HostTensor Slot(const ::tensorflow::Tensor& t) {
  return {const_cast<char*>(t.tensor_data().data()), static_cast<uint64_t>(t.TotalBytes())};
}

// What an op's Metal plan gives back: the call's status where it ran on
// Metal (a failure names the op), or nullopt: the CPU loops compute.
using OnMetal = std::optional<absl::Status>;

// The Metal route selected for one call of a TensorFlow kernel, handed to the
// op's plan by MetalOrCpu.
class MetalRoute {
 public:
  MetalRoute(::tensorflow::OpKernelContext* ctx, const metal_plan::Executor* executor)
      : ctx_(ctx), executor_(executor) {}

  // The TensorFlow kernel context (temporaries for outputs the plan writes
  // and the CPU kernel may skip).
  ::tensorflow::OpKernelContext* op_context() const { return ctx_; }

  // Whether the route takes `work` elements (at least its minimum work).
  bool Takes(int64_t work) const { return work >= metal_plan::MinWork(executor_); }

  // Runs build()'s plan on the host tensors of its slots where the route
  // takes `work` elements. nullopt: the CPU computes, below the route's
  // minimum work, for a plan that sums floats with atomics (the CPU kernels'
  // results are bitwise reproducible), or after a failure the CPU kernel does
  // not have (a size Metal refuses, a shader that does not compile, a missing
  // GPU feature; host_path.h Outcome::kCpu): then the first such call of each
  // op logs a warning naming the op and the reason, unless METAL_OPS_METAL=1
  // asked for Metal explicitly, which makes it the op's error.
  template <typename BuildPlan>
  OnMetal Run(int64_t work, const BuildPlan& build, std::initializer_list<metal_plan::HostTensor> slots) const {
    return RunSlots(work, build, slots.begin(), static_cast<int>(slots.size()));
  }
  template <typename BuildPlan>
  OnMetal Run(int64_t work, const BuildPlan& build, const std::vector<metal_plan::HostTensor>& slots) const {
    return RunSlots(work, build, slots.data(), static_cast<int>(slots.size()));
  }

 private:
  template <typename BuildPlan>
  OnMetal RunSlots(int64_t work, const BuildPlan& build, const metal_plan::HostTensor* slots, int num_slots) const {
    if (!Takes(work)) return std::nullopt;
    const metal_plan::Plan plan = build();
    if (plan.order_dependent) return std::nullopt;
    return RunPlan(plan, slots, num_slots);
  }

  OnMetal RunPlan(const metal_plan::Plan& plan, const metal_plan::HostTensor* slots, int num_slots) const {
    const std::string& type = ctx_->op_kernel().type_string();
    const metal_plan::Result result =
        metal_plan::Run(executor_, type + " (node " + ctx_->op_kernel().name() + ")", plan, slots, num_slots);
    if (result.outcome == metal_plan::Outcome::kCpu && metal_plan::CpuFallbackAllowed()) {
      if (metal_plan::CountFallback(type)) {
        LOG(WARNING) << result.message << "; this op computes on the CPU instead (METAL_OPS_METAL=0 keeps every op there)";
      }
      return std::nullopt;
    }
    return result.ok() ? absl::OkStatus() : absl::InternalError(result.message);
  }

  ::tensorflow::OpKernelContext* ctx_;
  const metal_plan::Executor* executor_;
};

// The one place that decides where a CPU functor's call runs: plan(route)
// (a callable taking the MetalRoute, returning OnMetal) when METAL_OPS_METAL
// selects a route and the call comes from a TensorFlow kernel, else, or where
// the plan gives nullopt, loops() (returning absl::Status or nothing). An XLA
// host handler's context (no OpKernelContext) goes to the loops at once, and
// so does every call where kHasPlan is false (an element type without
// shaders: the plan is then never instantiated). METAL_OPS_METAL asking for a
// route that is not there is the op's error rather than a quiet CPU run.
template <bool kHasPlan = true, typename Plan, typename Loops>
absl::Status MetalOrCpu(const Context& context, const Plan& plan, const Loops& loops) {
  if constexpr (kHasPlan) {
    if (::tensorflow::OpKernelContext* ctx = context.op_context()) {
      std::string name, reason;
      const metal_plan::Executor* executor = metal_plan::SelectedExecutor(&name, &reason);
      if (executor != nullptr) {
        OnMetal status = plan(MetalRoute(ctx, executor));
        if (status.has_value()) return *std::move(status);
      } else if (name == "unavailable") {
        return absl::FailedPreconditionError(std::string(ctx->op_kernel().type_string()) + ": " + reason);
      }
    }
  }
  if constexpr (std::is_void<decltype(loops())>::value) {
    loops();
    return absl::OkStatus();
  } else {
    return loops();
  }
}

}  // namespace cpu
}  // namespace mo

#endif  // MO_KERNELS_CPU_METAL_OFFLOAD_H_
