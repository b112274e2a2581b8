// Where the ops' CPU kernels send their Metal plans (docs/ARCHITECTURE.md,
// "Metal plans"): the executor METAL_OPS_METAL selects, asked for by every CPU
// kernel that has a plan before it computes on the CPU.
//
//   METAL_OPS_METAL=0     never (the CPU kernels compute)
//   METAL_OPS_METAL=1     the library's own Metal queue (macOS builds; an error elsewhere)
//   METAL_OPS_METAL=shim  the MSL shim on the CPU (build/libmetal_ops_shim_exec.so,
//                         loaded by `import metal_ops`; a test path)
//   unset                 the own queue on a Mac with a Metal GPU and no
//                         tensorflow-metal device; else none
// Work below a threshold of elements stays on the CPU (own queue:
// kDefaultMinWork, METAL_OPS_METAL_MIN_WORK overrides; the shim: 0).
//
// An executor is a C-ABI table so the shim library (built apart from the op
// library) can provide one: the op library finds `metal_ops_shim_executor`
// among the loaded libraries (dlsym).
#ifndef MO_KERNELS_METAL_PLAN_EXECUTOR_H_
#define MO_KERNELS_METAL_PLAN_EXECUTOR_H_

#include <cstdint>
#include <string>

#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// Bumped whenever Plan, HostTensor or Executor change layout: a shim library
// of another build is refused, not misread.
constexpr int kExecutorAbi = 2;

struct Executor {
  int abi;
  const char* name;  // "own-queue", "shim"
  // Runs `plan` over `num_slots` tensors; 0 on success, else writes a message
  // (at most error_len bytes, NUL-terminated) and returns nonzero. Blocks
  // until the work has completed.
  int (*run)(const Plan* plan, const HostTensor* slots, int num_slots, char* error, size_t error_len);
};

// An estimate, not a measurement (no Mac has run it): a command buffer's
// submit-and-wait costs tens of microseconds, about what a CPU core spends on
// 2^16 elements of the simplest ops. Documented in docs/ARCHITECTURE.md.
constexpr int64_t kDefaultMinWork = int64_t(1) << 16;

// The executor selected at this call and why ("shim", "METAL_OPS_METAL=shim"), or
// nullptr with the reason none is. Read at every call (tests switch it).
const Executor* SelectedExecutor(std::string* name, std::string* reason);

// The fewest elements of work sent to `executor` (METAL_OPS_METAL_MIN_WORK, else its default).
int64_t MinWork(const Executor* executor);

// Runs `plan`, turning a failure into a message naming `op`; "" on success.
std::string Run(const Executor* executor, const char* op, const Plan& plan, const HostTensor* slots, int num_slots);

// Counters of passes and plans run by executors in this process (tests check
// that the path they meant to test ran).
void CountRun(const Plan& plan);
int64_t PlansRun();
int64_t PassesRun();

// The library's own Metal queue (kernels/metal/own_queue_executor.mm on macOS,
// nullptr elsewhere), and whether a tensorflow-metal device is loaded.
const Executor* OwnQueueExecutor(std::string* why_not);
bool TensorflowMetalLoaded();

}  // namespace metal_plan
}  // namespace mo

extern "C" {
// For metal_ops.metal_path (ctypes): the active path's name and reason into
// the buffers; returns the number of plans run so far.
int64_t metal_ops_metal_path(char* name, size_t name_len, char* reason, size_t reason_len);
int64_t metal_ops_metal_passes_run();
}

#endif  // MO_KERNELS_METAL_PLAN_EXECUTOR_H_
