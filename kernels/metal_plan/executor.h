// Where the ops' CPU kernels send their Metal plans (docs/ARCHITECTURE.md,
// "Metal plans"): the route METAL_OPS_METAL selects, asked for once per call
// by the shared offload (kernels/cpu/metal_offload.h) before a CPU kernel
// computes.
//
//   METAL_OPS_METAL=0            never (the CPU kernels compute)
//   METAL_OPS_METAL=1            the library's own Metal queue (macOS builds; an error elsewhere)
//   METAL_OPS_METAL=shim         the own-queue host path on the strict model of Metal
//                                (tests/metal_shim/metal_model.cc, build/libmetal_ops_shim_exec.so,
//                                loaded by `import metal_ops`): a test route
//   METAL_OPS_METAL=shim-stream  the TF_MetalStream host path on the model, with a model of
//                                tensorflow-metal's batching stream: a test route
//   unset                        the own queue on a Mac with a Metal GPU and no
//                                tensorflow-metal device; else none
// Work below a threshold of elements stays on the CPU (own queue:
// kDefaultMinWork, METAL_OPS_METAL_MIN_WORK overrides; the model routes: 0).
//
// Every route runs the same host path (kernels/metal_plan/host_path.h) over
// the interface of kernels/metal_plan/metal_api.h: Apple's Metal
// (kernels/metal/metal_device.mm) or the model.
#ifndef MO_KERNELS_METAL_PLAN_EXECUTOR_H_
#define MO_KERNELS_METAL_PLAN_EXECUTOR_H_

#include <cstdint>
#include <string>

#include "kernels/metal_plan/host_path.h"
#include "kernels/metal_plan/metal_api.h"
#include "kernels/metal_plan/plan.h"

namespace mo {
namespace metal_plan {

// A route: a device and either its own queue or a stream.
struct Executor {
  const char* name;  // "own-queue", "shim", "shim-stream"
  mtl::Device* device;
  mtl::CommandQueue* queue;  // the own-queue routes
  mtl::Stream* stream;       // the stream route
};

// What the model library (tests/metal_shim/metal_model.cc) hands the op
// library: its device and stream, and the test-only steps the stream route
// needs around them (TensorFlow's own copies between host and device, its
// uninitialised outputs).
struct ModelHooks {
  int api;  // mtl::kApiVersion
  mtl::Device* device;
  mtl::Stream* stream;
  // TensorFlow's host-to-device and device-to-host copies of a tensor (not
  // the op's cost: on a Mac its tensors are Metal buffers already).
  void (*upload)(mtl::Buffer* buffer, const void* data, uint64_t bytes);
  void (*download)(mtl::Buffer* buffer, void* data, uint64_t bytes);
  // Fills the plan's written slots with NaN bytes (TensorFlow's outputs are
  // uninitialised), unless their memory overlaps another slot's.
  void (*poison_outputs)(const Plan* plan, const HostTensor* slots, int num_slots);
  // MTLCreateSystemDefaultDevice: `device`, or nullptr under the fault nil_device.
  mtl::Device* (*system_device)();
};

// The default's estimate, not a measurement (no Mac has run it): a command
// buffer's submit-and-wait costs tens of microseconds, about what a CPU core
// spends on 2^16 elements of the simplest ops. docs/METAL_COMPAT.md,
// "The offload threshold".
constexpr int64_t kDefaultMinWork = int64_t(1) << 16;

// The route selected at this call and why ("shim", "METAL_OPS_METAL=shim"), or
// nullptr with the reason none is. Read at every call (tests switch it).
const Executor* SelectedExecutor(std::string* name, std::string* reason);

// The fewest elements of work sent to `executor` (METAL_OPS_METAL_MIN_WORK, else its default).
int64_t MinWork(const Executor* executor);

// Whether a failure the CPU kernel does not have (Outcome::kCpu) sends the
// call back to the CPU: yes unless METAL_OPS_METAL=1 asked for Metal
// explicitly (then it is the op's error).
bool CpuFallbackAllowed();

// Runs `plan` on the route; a failure's message names `op`.
Result Run(const Executor* executor, const std::string& op, const Plan& plan, const HostTensor* slots, int num_slots);

// Records a fallback to the CPU; true the first time for `op` (the caller
// then warns once, naming the op and the reason).
bool CountFallback(const std::string& op);

// The own queue's first-use check (kernels/cpu/metal_offload.h): the first
// call that uses a pipeline in this process runs on the GPU and on the CPU
// kernel and the two are compared; a mismatch or a GPU-side failure turns
// Metal off for the op for the rest of the process.
// Whether `plan` uses a pipeline no call has checked yet.
bool NeedsCheck(const Plan& plan);
// Marks the pipelines of `plan` checked.
void MarkChecked(const Plan& plan);
// Whether Metal is off for `op` (a mismatch or a GPU failure turned it off).
bool TurnedOff(const std::string& op);
// Turns Metal off for `op` and counts a fallback; true the first time (the
// caller then warns once, naming the op and the reason).
bool TurnOff(const std::string& op);
// The checks' totals: checks run, ops turned off, bytes compared, and the
// host time the checks added (nanoseconds: the CPU kernel's run, the copies
// and the comparison).
struct CheckTotals {
  uint64_t checks = 0, turned_off = 0, bytes = 0, nanoseconds = 0;
};
void CountCheck(uint64_t bytes, uint64_t nanoseconds);
CheckTotals Checks();

// Counters of plans, passes and fallbacks of this process and the host cost
// of the plans run (tests check that the route they meant to test ran).
int64_t PlansRun();
int64_t PassesRun();
int64_t Fallbacks();
Cost TotalCost();

// The library's own Metal device and queue (kernels/metal/metal_device.mm on
// macOS, nullptr elsewhere), and whether a tensorflow-metal device is loaded.
const Executor* OwnQueueExecutor(std::string* why_not);
// The own queue on `device`, the system's GPU (MTLCreateSystemDefaultDevice,
// or the model's), made once per device and named `name`; nullptr with the
// reason where there is no device (a virtual machine, a session without the
// GPU) or Metal gives no queue. A missing device is no error: the first time,
// unless METAL_OPS_METAL=1 asked for Metal, one warning says why the ops
// compute on the CPU.
const Executor* OwnQueueOn(mtl::Device* device, const char* name, std::string* why_not);
// A kernel left off tensorflow-metal's GPU device at registration
// (kernels/metal/metal_kernel.cc RegisterKernel): `op` and why. Where
// tensorflow-metal's device is loaded, the path's reason names these ops, and
// the first call of an op on the CPU logs that one line (dispatch_rules.h
// LeftToCpuMessage): after every registration, since each op's file registers
// its kernels in a static initializer of its own, in no set order.
void LeaveToCpu(const std::string& op, const std::string& why);
bool TensorflowMetalLoaded();
// The system's GPU (kernels/metal/metal_device.mm, macOS builds):
// MTLCreateSystemDefaultDevice (which gives none in a process that does not
// link CoreGraphics), else the first of MTLCopyAllDevices; nullptr where Metal
// gives none (a virtual machine, a session without access to the GPU).
mtl::Device* SystemDevice();

}  // namespace metal_plan
}  // namespace mo

extern "C" {
// For metal_ops.metal_path (ctypes): the active route's name and reason into
// the buffers; returns the number of plans run so far.
int64_t metal_ops_metal_path(char* name, size_t name_len, char* reason, size_t reason_len);
int64_t metal_ops_metal_passes_run();
int64_t metal_ops_metal_fallbacks();
int metal_ops_cpu_fallback_allowed();
// The host cost of the plans run: {bytes in, bytes out, wrapped, command buffers, waits}.
void metal_ops_metal_cost(uint64_t out[5]);
// The first-use checks: {checks, ops turned off, bytes compared, nanoseconds}.
void metal_ops_metal_checks(uint64_t out[4]);
}

#endif  // MO_KERNELS_METAL_PLAN_EXECUTOR_H_
