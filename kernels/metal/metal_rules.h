// The decisions the Metal host glue makes, as plain C++ so they are unit-tested
// on machines without Metal (tests/metal_shim/metal_rules_shim.cc): which
// tensors may be bound as MTLBuffers, which Metal Shading Language version a
// macOS offers, and how a 1-D grid is cut into threadgroups.
#ifndef METAL_OPS_KERNELS_METAL_METAL_RULES_H_
#define METAL_OPS_KERNELS_METAL_METAL_RULES_H_

#include <cstdint>
#include <string>

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

}  // namespace metal
}  // namespace mo

#endif  // METAL_OPS_KERNELS_METAL_METAL_RULES_H_
