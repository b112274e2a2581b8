// The CPU kernels' route to Metal (kernels/metal_plan/executor.h): before a
// CPU functor computes, it asks whether an executor is selected and the work
// is large enough; if so it builds its op's Metal plan and runs it on the
// tensors' host memory, and the CPU does nothing else. No device string for
// the user: the ops stay on TensorFlow's CPU device.
//
//   absl::Status status;
//   if (cpu::RunOnMetal(ctx, n, [&] { return metal_plan::TruncExpForward(dtype, n); },
//                       {{x, bytes}, {y, bytes}}, &status)) return status;
#ifndef MO_KERNELS_CPU_METAL_OFFLOAD_H_
#define MO_KERNELS_CPU_METAL_OFFLOAD_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
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

// Whether RunOnMetal would send work of this size to a Metal route (an op
// whose Metal plan writes outputs the CPU kernel may skip then allocates them).
inline bool GoesToMetal(int64_t work) {
  std::string name, reason;
  const metal_plan::Executor* executor = metal_plan::SelectedExecutor(&name, &reason);
  return executor != nullptr && work >= metal_plan::MinWork(executor);
}

// The one place that decides where a CPU kernel's work runs. True when the
// work went to a Metal route: *status is then its result (a failure names
// the op). False: compute on the CPU, as always without an OpKernelContext
// (an XLA host handler), when no route is selected, below the route's
// minimum work, or when the route failed in a way the CPU kernel does not
// (a size Metal refuses, a shader that does not compile, a missing GPU
// feature; host_path.h Outcome::kCpu): then the first such call of each op
// logs a warning naming the op and the reason, unless METAL_OPS_METAL=1 asked
// for Metal explicitly, which makes it the op's error.
template <typename BuildPlan>
bool RunOnMetal(const Context& context, int64_t work, BuildPlan build,
                const std::vector<metal_plan::HostTensor>& tensors, absl::Status* status) {
  ::tensorflow::OpKernelContext* ctx = context.op_context();
  if (ctx == nullptr) return false;
  std::string name, reason;
  const metal_plan::Executor* executor = metal_plan::SelectedExecutor(&name, &reason);
  if (executor == nullptr) {
    // METAL_OPS_METAL asked for a path that is not there: say so rather than
    // quietly compute on the CPU.
    if (name == "unavailable") {
      *status = absl::FailedPreconditionError(std::string(ctx->op_kernel().type_string()) + ": " + reason);
      return true;
    }
    return false;
  }
  if (work < metal_plan::MinWork(executor)) return false;
  const metal_plan::Plan plan = build();
  if (plan.order_dependent) return false;  // the CPU kernel's results are bitwise reproducible
  const std::string op = ctx->op_kernel().type_string() + " (node " + ctx->op_kernel().name() + ")";
  const metal_plan::Result result =
      metal_plan::Run(executor, op, plan, tensors.data(), static_cast<int>(tensors.size()));
  if (result.outcome == metal_plan::Outcome::kCpu && metal_plan::CpuFallbackAllowed()) {
    if (metal_plan::CountFallback(ctx->op_kernel().type_string())) {
      LOG(WARNING) << result.message << "; this op computes on the CPU instead (METAL_OPS_METAL=0 keeps every op there)";
    }
    return false;
  }
  *status = result.ok() ? absl::OkStatus() : absl::InternalError(result.message);
  return true;
}

template <typename BuildPlan>
bool RunOnMetal(const Context& context, int64_t work, BuildPlan build,
                std::initializer_list<metal_plan::HostTensor> slots, absl::Status* status) {
  return RunOnMetal(context, work, build, std::vector<metal_plan::HostTensor>(slots), status);
}

}  // namespace cpu
}  // namespace mo

#endif  // MO_KERNELS_CPU_METAL_OFFLOAD_H_
