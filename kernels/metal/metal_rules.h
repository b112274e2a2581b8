// The decisions the Metal host glue makes, as plain C++ so they are unit-tested
// on machines without Metal (tests/metal_shim/metal_rules_shim.cc): which
// tensors may be bound as MTLBuffers, which Metal Shading Language version a
// macOS offers, how a 1-D grid is cut into threadgroups, whether a
// threadgroup dispatch fits the GPU, how much of a buffer a blit fill may
// cover, the METAL_OPS_GPU_SYNC debug mode and its error message, how a
// command buffer gets submitted for a wait outside the stream's queue.
#ifndef MO_KERNELS_METAL_METAL_RULES_H_
#define MO_KERNELS_METAL_METAL_RULES_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace mo {
namespace metal {

// tensorflow-metal allocates every non-empty tensor as an MTLBuffer and hands
// TensorFlow the id<MTLBuffer> as the data pointer. A 0-element tensor is
// TensorFlow's EmptyTensor instead: its data is a static CPU byte, so its
// TF_TensorData must never be bridged to an MTLBuffer (nor retained by ARC).
// The glue binds a small placeholder buffer at that index instead.
inline bool TensorHasMetalBuffer(int64_t num_elements) { return num_elements > 0; }

// A Metal Shading Language version, e.g. {3, 0}.
struct MslVersion {
  int major;
  int minor;
};

inline bool MslAtLeast(MslVersion have, MslVersion need) {
  return have.major != need.major ? have.major > need.major : have.minor >= need.minor;
}

// The newest language version this library uses that the running macOS
// compiles: MSL 3.0 (atomic_float, needed by the scatter-add gradients) came
// with macOS 13; macOS 12 offers 2.4.
inline MslVersion MslVersionForMacOS(int os_major) {
  return os_major >= 13 ? MslVersion{3, 0} : MslVersion{2, 4};
}

// MTLLanguageVersion's raw value: (major << 16) | minor. Written as a number
// so the library builds with SDKs older than the version it asks for at run
// time (the macOS 12 SDK has no MTLLanguageVersion3_0).
inline uint64_t MtlLanguageVersionValue(MslVersion v) {
  return (static_cast<uint64_t>(v.major) << 16) | static_cast<uint64_t>(v.minor);
}

inline std::string MslVersionString(MslVersion v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

// The error a kernel reports when its shaders need a newer macOS.
inline std::string MslTooOldMessage(const std::string& library, MslVersion need, int os_major, int os_minor) {
  return "metal_ops: the Metal kernels of '" + library + "' need Metal Shading Language " +
         MslVersionString(need) + " (macOS 13 or newer); this Mac runs macOS " + std::to_string(os_major) + "." +
         std::to_string(os_minor) + ". Update macOS, or run these ops on the CPU with tf.device('/CPU:0').";
}

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
    return "metal_ops: this GPU runs at most " + std::to_string(max_threads) +
           " threads per threadgroup of this kernel; it needs " + std::to_string(threads);
  }
  const uint64_t need = static_bytes + ThreadgroupMemoryLength(bytes);
  if (need > device_bytes) {
    return "metal_ops: this GPU has " + std::to_string(device_bytes) +
           " bytes of threadgroup memory; the kernel needs " + std::to_string(need);
  }
  return std::string();
}

// The byte count a blit fill of a tensor of `bytes` covers in its MTLBuffer of
// `buffer_length` bytes: on macOS fillBuffer:range:value: needs the range's
// offset and length to be multiples of 4, so `bytes` rounded up to one, which
// the buffer must hold (the padding is the tensor's own: tensorflow-metal
// gives every tensor its own buffer). 0 when it does not (the caller fails
// rather than break the rule).
inline uint64_t FillLength(uint64_t bytes, uint64_t buffer_length) {
  const uint64_t length = (bytes + 3u) / 4u * 4u;
  return length <= buffer_length ? length : 0;
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

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_METAL_RULES_H_
