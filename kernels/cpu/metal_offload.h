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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// The own queue's first-use check of one call (metal_plan::NeedsCheck): the
// op's outputs as they were before Metal wrote them, the ranges of them the
// plans wrote, and, once the plans ran, Metal's results for those ranges.
class FirstUseCheck {
 public:
  // Keeps the op's allocated outputs before the first plan of the call that
  // needs the check runs (an output may share memory with an input).
  void Begin(::tensorflow::OpKernelContext* ctx);
  // Records the ranges of the op's outputs that `plan` writes through `slots`.
  void AddWritten(::tensorflow::OpKernelContext* ctx, const metal_plan::Plan& plan,
                  const metal_plan::HostTensor* slots, int num_slots);
  bool active() const { return active_; }
  // Keeps Metal's results and puts the outputs back as they were, for the CPU kernel.
  void TakeMetalResults();
  // Puts Metal's results back into the outputs (they agreed with the CPU
  // kernel's: every call then returns what Metal computes).
  void KeepMetalResults();
  // Puts the outputs back as they were (Metal did not finish the call).
  void Restore();
  // What differs between Metal's results and the CPU kernel's results in
  // the outputs (the first element beyond the tolerance), or "".
  std::string Compare() const;
  uint64_t bytes() const { return bytes_; }

 private:
  struct Saved {
    char* data;
    std::string before, metal;
  };
  struct Written {
    char* data;
    uint64_t bytes;
    ::tensorflow::DataType dtype;
    std::string metal;
  };
  bool active_ = false;
  std::vector<Saved> saved_;
  std::vector<Written> written_;
  uint64_t bytes_ = 0;
};

// The tolerance of the first-use check, relative and absolute, per element:
// |metal - cpu| <= tolerance * (1 + |cpu|); NaN and infinities must agree.
// Integer outputs must be equal.
constexpr double kCheckToleranceFloat32 = 1e-3;
constexpr double kCheckToleranceFloat16 = 1e-2;

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
  // asked for Metal explicitly, which makes it the op's error. On the own
  // queue a GPU-side failure (Outcome::kGpu) turns Metal off for the op (one
  // warning) and the CPU computes, and a plan using a pipeline not yet checked
  // in this process is checked against the CPU kernel (MetalOrCpu).
  template <typename BuildPlan>
  OnMetal Run(int64_t work, const BuildPlan& build, std::initializer_list<metal_plan::HostTensor> slots) const {
    return RunSlots(work, build, slots.begin(), static_cast<int>(slots.size()));
  }
  template <typename BuildPlan>
  OnMetal Run(int64_t work, const BuildPlan& build, const std::vector<metal_plan::HostTensor>& slots) const {
    return RunSlots(work, build, slots.data(), static_cast<int>(slots.size()));
  }

  // The most threads per threadgroup the route's GPU runs `function` of
  // `library` with (metal_plan::PipelineThreadLimit; 0: unknown), for a plan
  // that narrows its threadgroups to its pipeline rather than be refused.
  uint64_t ThreadLimit(const std::string& library, const std::string& function, bool simdgroup_matrix) const {
    return metal_plan::PipelineThreadLimit(*executor_->device, library, function, simdgroup_matrix);
  }

  // The call's first-use check (MetalOrCpu reads it once the plan returns).
  FirstUseCheck& check() const { return check_; }
  // Whether the route is the library's own queue (a check and a CPU rerun are
  // possible: it waits for every call) rather than tensorflow-metal's stream.
  bool own_queue() const { return executor_->queue != nullptr; }
  const std::string& op_type() const { return ctx_->op_kernel().type_string(); }
  // Marks the pipelines of the plans the call ran checked (their results
  // agreed with the CPU kernel's).
  void MarkChecked() const {
    for (const metal_plan::Plan& plan : pending_) metal_plan::MarkChecked(plan);
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
    const std::string& type = op_type();
    if (own_queue() && metal_plan::TurnedOff(type)) return std::nullopt;
    if (own_queue() && metal_plan::NeedsCheck(plan)) {
      if (!check_.active()) check_.Begin(ctx_);
      check_.AddWritten(ctx_, plan, slots, num_slots);
    }
    const metal_plan::Result result =
        metal_plan::Run(executor_, type + " (node " + ctx_->op_kernel().name() + ")", plan, slots, num_slots);
    if (result.ok() && check_.active()) pending_.push_back(plan);
    if (result.outcome == metal_plan::Outcome::kCpu && metal_plan::CpuFallbackAllowed()) {
      if (metal_plan::CountFallback(type)) {
        LOG(WARNING) << result.message << "; this op computes on the CPU instead (METAL_OPS_METAL=0 keeps every op there)";
      }
      return std::nullopt;
    }
    if (result.outcome == metal_plan::Outcome::kGpu && own_queue() && metal_plan::CpuFallbackAllowed()) {
      if (metal_plan::TurnOff(type)) {
        LOG(WARNING) << result.message << "; Metal is off for this op for the rest of the process: it computes on "
                     << "the CPU (METAL_OPS_METAL=1 makes a GPU failure the op's error)";
      }
      return std::nullopt;
    }
    return result.ok() ? absl::OkStatus() : absl::InternalError(result.message);
  }

  ::tensorflow::OpKernelContext* ctx_;
  const metal_plan::Executor* executor_;
  mutable FirstUseCheck check_;
  mutable std::vector<metal_plan::Plan> pending_;  // plans run under the check
};

// Runs loops() (returning absl::Status or nothing) as a status.
template <typename Loops>
absl::Status RunLoops(const Loops& loops) {
  if constexpr (std::is_void<decltype(loops())>::value) {
    loops();
    return absl::OkStatus();
  } else {
    return loops();
  }
}

// The first-use check's end: the CPU kernel recomputes the call into the
// outputs (put back as they were) and Metal's results are compared with its.
// Agreement marks the pipelines checked and the call returns Metal's results
// (as every later call does: the CPU kernels' run-to-run reproducibility
// holds on the route). A mismatch keeps the CPU kernel's results and turns
// Metal off for the op with one warning (METAL_OPS_METAL=1: the op's error).
template <typename Loops>
absl::Status CheckAgainstCpu(const MetalRoute& route, const Loops& loops) {
  const auto start = std::chrono::steady_clock::now();
  FirstUseCheck& check = route.check();
  check.TakeMetalResults();
  absl::Status status = RunLoops(loops);
  if (!status.ok()) return status;
  const std::string mismatch = check.Compare();
  metal_plan::CountCheck(check.bytes(), static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                 std::chrono::steady_clock::now() - start)
                                                                 .count()));
  if (mismatch.empty()) {
    check.KeepMetalResults();
    route.MarkChecked();
    return absl::OkStatus();
  }
  const std::string message = route.op_type() + " on Metal: the first call's result differs from the CPU kernel's (" +
                              mismatch + ")";
  if (!metal_plan::CpuFallbackAllowed()) return absl::InternalError(message);
  if (metal_plan::TurnOff(route.op_type())) {
    LOG(WARNING) << message << "; Metal is off for this op for the rest of the process: it computes on the CPU "
                 << "(METAL_OPS_METAL=0 keeps every op there)";
  }
  return absl::OkStatus();
}

// The one place that decides where a CPU functor's call runs: plan(route)
// (a callable taking the MetalRoute, returning OnMetal) when METAL_OPS_METAL
// selects a route and the call comes from a TensorFlow kernel, else, or where
// the plan gives nullopt, loops() (returning absl::Status or nothing). An XLA
// host handler's context (no OpKernelContext) goes to the loops at once, and
// so does every call where kHasPlan is false (an element type without
// shaders: the plan is then never instantiated). METAL_OPS_METAL asking for a
// route that is not there is the op's error rather than a quiet CPU run. On
// the own queue, a call whose plans use a pipeline not yet checked in this
// process runs on Metal and then on the CPU (CheckAgainstCpu).
template <bool kHasPlan = true, typename Plan, typename Loops>
absl::Status MetalOrCpu(const Context& context, const Plan& plan, const Loops& loops) {
  if constexpr (kHasPlan) {
    if (::tensorflow::OpKernelContext* ctx = context.op_context()) {
      std::string name, reason;
      const metal_plan::Executor* executor = metal_plan::SelectedExecutor(&name, &reason);
      if (executor != nullptr) {
        const MetalRoute route(ctx, executor);
        OnMetal status = plan(route);
        if (status.has_value() && (!status->ok() || !route.check().active())) return *std::move(status);
        if (status.has_value()) return CheckAgainstCpu(route, loops);
        if (route.check().active()) route.check().Restore();
      } else if (name == "unavailable") {
        return absl::FailedPreconditionError(std::string(ctx->op_kernel().type_string()) + ": " + reason);
      }
    }
  }
  return RunLoops(loops);
}

inline void FirstUseCheck::Begin(::tensorflow::OpKernelContext* ctx) {
  active_ = true;
  for (int i = 0; i < ctx->num_outputs(); ++i) {
    ::tensorflow::Tensor* out = ctx->mutable_output(i);
    if (out == nullptr || out->TotalBytes() == 0) continue;
    char* data = const_cast<char*>(out->tensor_data().data());
    saved_.push_back({data, std::string(data, out->TotalBytes())});
    bytes_ += out->TotalBytes();
  }
}

inline void FirstUseCheck::AddWritten(::tensorflow::OpKernelContext* ctx, const metal_plan::Plan& plan,
                                      const metal_plan::HostTensor* slots, int num_slots) {
  for (int s = 0; s < num_slots && static_cast<size_t>(s) < plan.written.size(); ++s) {
    if (!plan.written[static_cast<size_t>(s)] || slots[s].bytes == 0) continue;
    const char* begin = static_cast<const char*>(slots[s].data);
    for (int i = 0; i < ctx->num_outputs(); ++i) {
      ::tensorflow::Tensor* out = ctx->mutable_output(i);
      if (out == nullptr || out->TotalBytes() == 0) continue;
      const char* base = out->tensor_data().data();
      const uint64_t element = ::tensorflow::DataTypeSize(out->dtype());
      const char* lo = std::max(base, begin);
      const char* hi = std::min(base + out->TotalBytes(), begin + slots[s].bytes);
      if (lo >= hi || element == 0 || static_cast<uint64_t>(lo - base) % element != 0) continue;
      bool known = false;
      for (const Written& w : written_) known = known || (w.data == lo && w.bytes == static_cast<uint64_t>(hi - lo));
      if (!known) written_.push_back({const_cast<char*>(lo), static_cast<uint64_t>(hi - lo), out->dtype(), {}});
    }
  }
}

inline void FirstUseCheck::TakeMetalResults() {
  for (Written& w : written_) w.metal.assign(w.data, static_cast<size_t>(w.bytes));
  for (Saved& s : saved_) s.metal.assign(s.data, s.before.size());
  Restore();
}

inline void FirstUseCheck::KeepMetalResults() {
  for (const Saved& s : saved_) std::memcpy(s.data, s.metal.data(), s.metal.size());
}

inline void FirstUseCheck::Restore() {
  for (const Saved& s : saved_) std::memcpy(s.data, s.before.data(), s.before.size());
}

namespace check_internal {
// Whether `metal` agrees with `cpu` at `tolerance` (see kCheckToleranceFloat32).
inline bool Agree(double metal, double cpu, double tolerance) {
  if (std::isnan(metal) || std::isnan(cpu)) return std::isnan(metal) && std::isnan(cpu);
  if (std::isinf(metal) || std::isinf(cpu)) return metal == cpu;
  return std::fabs(metal - cpu) <= tolerance * (1.0 + std::fabs(cpu));
}
}  // namespace check_internal

inline std::string FirstUseCheck::Compare() const {
  for (const Written& w : written_) {
    const size_t n = w.metal.size();
    if (w.dtype == ::tensorflow::DT_FLOAT || w.dtype == ::tensorflow::DT_HALF) {
      const bool half = w.dtype == ::tensorflow::DT_HALF;
      const size_t size = half ? 2 : 4;
      for (size_t i = 0; i < n / size; ++i) {
        double metal, cpu;
        if (half) {
          Eigen::half a, b;
          std::memcpy(&a, w.metal.data() + i * size, size);
          std::memcpy(&b, w.data + i * size, size);
          metal = static_cast<float>(a);
          cpu = static_cast<float>(b);
        } else {
          float a, b;
          std::memcpy(&a, w.metal.data() + i * size, size);
          std::memcpy(&b, w.data + i * size, size);
          metal = a;
          cpu = b;
        }
        if (!check_internal::Agree(metal, cpu, half ? kCheckToleranceFloat16 : kCheckToleranceFloat32)) {
          return "element " + std::to_string(i) + " of an output: Metal " + std::to_string(metal) + ", CPU " +
                 std::to_string(cpu);
        }
      }
    } else if (std::memcmp(w.metal.data(), w.data, n) != 0) {
      size_t at = 0;
      while (at < n && w.metal[at] == w.data[at]) ++at;
      return "byte " + std::to_string(at) + " of an integer output";
    }
  }
  return "";
}

}  // namespace cpu
}  // namespace mo

#endif  // MO_KERNELS_CPU_METAL_OFFLOAD_H_
