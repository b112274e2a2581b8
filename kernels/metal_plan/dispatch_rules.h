// The dispatch rules of the Metal host path (kernels/metal_plan/host_path.cc)
// and the stream glue, as plain C++ so they are unit-tested on machines
// without Metal (tests/metal_shim/metal_rules_shim.cc): how a 1-D grid is cut
// into threadgroups, whether a threadgroup dispatch fits the GPU, the
// METAL_OPS_GPU_SYNC debug mode and its error message, how a command buffer
// gets submitted for a wait outside the stream's queue.
#ifndef MO_KERNELS_METAL_PLAN_DISPATCH_RULES_H_
#define MO_KERNELS_METAL_PLAN_DISPATCH_RULES_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace mo {
namespace metal {

// Threadgroups for about `num_threads` threads in groups of `width`: at
// least one, at most kMaxThreadgroups (shaders loop grid-stride over the rest).
constexpr uint64_t kMaxThreadgroups = uint64_t(1) << 20;
inline uint64_t ThreadgroupCount(uint64_t num_threads, uint64_t width) {
  if (width == 0) return 1;
  uint64_t groups = num_threads / width + (num_threads % width != 0 ? 1 : 0);
  if (groups > kMaxThreadgroups) groups = kMaxThreadgroups;
  return groups == 0 ? 1 : groups;
}

// Threadgroup memory is allocated in multiples of 16 bytes.
inline uint64_t ThreadgroupMemoryLength(uint64_t bytes) { return (bytes + 15u) / 16u * 16u; }

// Why a dispatch of `threads` threads per threadgroup with `bytes` of
// threadgroup memory (rounded up by ThreadgroupMemoryLength) does not fit a
// pipeline that runs at most `max_threads` per threadgroup and declares
// `static_bytes` itself, on a device with `device_bytes`; empty when it fits.
// Every op checks this before it encodes anything.
inline std::string ThreadgroupFitError(uint64_t max_threads, uint64_t threads, uint64_t static_bytes,
                                       uint64_t bytes, uint64_t device_bytes) {
  if (threads == 0 || threads > max_threads) {
    return "this GPU runs at most " + std::to_string(max_threads) +
           " threads per threadgroup of this kernel; it needs " + std::to_string(threads);
  }
  const uint64_t need = static_bytes + ThreadgroupMemoryLength(bytes);
  if (need > device_bytes) {
    return "this GPU has " + std::to_string(device_bytes) +
           " bytes of threadgroup memory; the kernel needs " + std::to_string(need);
  }
  return std::string();
}

// The simdgroup_matrix shaders assume 32-wide SIMD-groups (every Apple GPU's
// threadExecutionWidth); why a pipeline of `width` cannot run them, or empty.
constexpr uint64_t kSimdgroupWidth = 32;
inline std::string SimdWidthError(uint64_t width) {
  if (width == kSimdgroupWidth) return std::string();
  return "the simdgroup_matrix shaders need 32-wide SIMD-groups; this GPU's pipeline has a threadExecutionWidth of " +
         std::to_string(width);
}

// The debug mode METAL_OPS_GPU_SYNC=1 (docs/ARCHITECTURE.md): every op commits
// its command buffer and waits, and a command-buffer error becomes the op's error.
constexpr const char* kGpuSyncVariable = "METAL_OPS_GPU_SYNC";
inline bool GpuSyncRequested(const char* value) {
  return value != nullptr && (std::strcmp(value, "1") == 0 || std::strcmp(value, "true") == 0);
}

// Whether the debug mode is on for the op being encoded. Read at every op
// call (one getenv, small beside encoding a command buffer), not once per
// process: setting the variable at any point, e.g. in a test module after
// other modules ran Metal ops, takes effect from the next op on.
inline bool GpuSyncOn() { return GpuSyncRequested(std::getenv(kGpuSyncVariable)); }

// How an op that needs its result on the CPU gets its command buffer submitted
// without waiting inside the stream's queue: tensorflow-metal's `commit`
// submits only every MPS_MAX_COMMIT_COUNT-th call (tf_metal_stream.h), so it
// is called until `submitted()` says the Metal command buffer holding the
// op's work has left the not-enqueued / enqueued states, at most
// kMaxCommitCalls times. True: the caller leaves the queue and waits for that
// command buffer outside it. False (a stream whose commit never submits):
// the caller falls back to commitAndWait inside the queue.
constexpr int kMaxCommitCalls = 16;
template <typename Commit, typename Submitted>
bool CommitUntilSubmitted(Commit commit, Submitted submitted, int max_calls = kMaxCommitCalls) {
  for (int i = 0; i < max_calls; ++i) {
    commit();
    if (submitted()) return true;
  }
  return false;
}

// The error of a command buffer that failed in the debug mode: the op (its
// node name), the kernels it encoded, Metal's status and error text.
inline std::string GpuErrorMessage(const std::string& op, const std::vector<std::string>& kernels,
                                   const std::string& status, const std::string& error) {
  std::string names;
  for (const std::string& k : kernels) names += (names.empty() ? "" : ", ") + k;
  return "metal_ops: the GPU failed the command buffer holding op '" + op + "' (kernels: " +
         (names.empty() ? std::string("none") : names) + "; the op waited for it (" + kGpuSyncVariable +
         "=1, or an op that reads its result on the CPU), so the fault is in this op or in work TensorFlow "
         "encoded before it on the same command buffer): status " + status + ": " + error;
}

// The one log line naming the ops left off the GPU device and why, from
// (op, why) pairs (kernels/metal/metal_rules.h GpuRegistrationRefusal) in registration order (an op once per
// reason however many types it registers); "" for none.
inline std::string LeftToCpuMessage(const std::vector<std::pair<std::string, std::string>>& left) {
  std::vector<std::pair<std::string, std::string>> groups;  // reason, its ops
  for (const auto& [op, why] : left) {
    size_t g = 0;
    while (g < groups.size() && groups[g].first != why) ++g;
    if (g == groups.size()) groups.push_back({why, ""});
    const std::string listed = ", " + groups[g].second + ",";
    if (listed.find(", " + op + ",") == std::string::npos) {
      groups[g].second += (groups[g].second.empty() ? "" : ", ") + op;
    }
  }
  std::string line;
  for (const auto& [why, ops] : groups) line += (line.empty() ? "" : "; ") + ops + ": " + why;
  return line.empty() ? "" : "metal_ops: ops not registered for tensorflow-metal's GPU (TensorFlow runs them on the "
                             "CPU): " + line;
}

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_PLAN_DISPATCH_RULES_H_
