// The decisions the Metal host glue makes, as plain C++ so they are unit-tested
// on machines without Metal (tests/metal_shim/metal_rules_shim.cc): which
// tensors may be bound as MTLBuffers, which Metal Shading Language version a
// device offers, how much of a buffer a blit fill may cover; the dispatch
// rules the host path shares are in kernels/metal_plan/dispatch_rules.h.
#ifndef MO_KERNELS_METAL_METAL_RULES_H_
#define MO_KERNELS_METAL_METAL_RULES_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/metal/embedded_sources.h"
#include "kernels/metal_plan/dispatch_rules.h"

namespace mo {
namespace metal {

// tensorflow-metal allocates every non-empty tensor as an MTLBuffer and hands
// TensorFlow the id<MTLBuffer> as the data pointer. A 0-element tensor is
// TensorFlow's EmptyTensor instead: its data is a static CPU byte, so its
// TF_TensorData must never be bridged to an MTLBuffer (nor retained by ARC).
// The glue binds a small placeholder buffer at that index instead.
inline bool TensorHasMetalBuffer(int64_t num_elements) { return num_elements > 0; }

// Why a non-empty tensor of `bytes` bytes cannot be bound through its data
// bridged to an MTLBuffer: the data is no MTLBuffer (`is_buffer` false: the
// kernel runs on another device than tensorflow-metal's GPU) or a buffer
// shorter than the tensor (`length` bytes); "" when it can. The op then fails
// rather than hand Metal a pointer that is not a buffer.
inline std::string TensorBufferError(bool is_buffer, uint64_t length, uint64_t bytes) {
  if (is_buffer && length >= bytes) return std::string();
  return "metal_ops: a tensor's data is not a Metal buffer of its " + std::to_string(bytes) + " bytes (" +
         (is_buffer ? "the buffer holds " + std::to_string(length) : std::string("no MTLBuffer")) +
         "; the op's Metal kernel runs on tensorflow-metal's GPU device only)";
}

// A Metal Shading Language version, e.g. {3, 0}.
struct MslVersion {
  int major;
  int minor;
};

inline bool MslAtLeast(MslVersion have, MslVersion need) {
  return have.major != need.major ? have.major > need.major : have.minor >= need.minor;
}

// MTLGPUFamilyMetal3's raw value, for supportsFamily: (Apple added the family
// in macOS 13, with MSL 3.0; the macOS 12 SDK has no such enumerator).
constexpr uint64_t kMtlGpuFamilyMetal3 = 5001;

// The newest language version this library uses that the device compiles,
// from its answer to supportsFamily:MTLGPUFamilyMetal3: MSL 3.0 (atomic_float,
// needed by the scatter-add gradients) comes with the Metal 3 family (every
// Apple-silicon GPU on macOS 13 or newer); else 2.4. Asked of the device, not
// the OS version: NSProcessInfo reports 10.16 to a process linked against an
// SDK older than 11.
inline MslVersion MslVersionForDevice(bool metal3) { return metal3 ? MslVersion{3, 0} : MslVersion{2, 4}; }

// MTLLanguageVersion's raw value: (major << 16) | minor. Written as a number
// so the library builds with SDKs older than the version it asks for at run
// time (the macOS 12 SDK has no MTLLanguageVersion3_0).
inline uint64_t MtlLanguageVersionValue(MslVersion v) {
  return (static_cast<uint64_t>(v.major) << 16) | static_cast<uint64_t>(v.minor);
}

inline std::string MslVersionString(MslVersion v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

// Why a GPU does not compile `library`'s shaders, which need `need`.
inline std::string MslTooOldReason(const std::string& library, MslVersion need) {
  return "the Metal kernels of '" + library + "' need Metal Shading Language " + MslVersionString(need) +
         ", which this GPU does not offer (it is not of MTLGPUFamilyMetal3: an Apple-silicon GPU on macOS 13 or "
         "newer is)";
}

// The error a kernel reports when its shaders need a language version the device does not offer.
inline std::string MslTooOldMessage(const std::string& library, MslVersion need) {
  return "metal_ops: " + MslTooOldReason(library, need) +
         ". Update macOS, or run these ops on the CPU with tf.device('/CPU:0').";
}

// The embedded shader library of the Metal kernels registered from source
// file `file` (the registration call's __FILE__): its op folder's name, as
// kernels/<op>/<op>_metal.cc uses kernels/<op>/<op>.metal.
inline std::string LibraryOfRegistration(const std::string& file) {
  const size_t slash = file.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "";
  const size_t before = file.find_last_of('/', slash - 1);
  const size_t start = before == std::string::npos ? 0 : before + 1;
  return file.substr(start, slash - start);
}

// The setting that leaves shader libraries' kernels off tensorflow-metal's
// GPU device: METAL_OPS_TF_METAL_OFF, a comma-separated list of libraries
// (op folders: `fused_mlp` for kernels/fused_mlp/), or `all`. Read once, as
// the library loads and registers its kernels.
constexpr const char* kTfMetalOffVariable = "METAL_OPS_TF_METAL_OFF";
inline const char* TfMetalOffSetting() { return std::getenv(kTfMetalOffVariable); }

// Whether the variable's `value` names `library` (or is `all`).
inline bool LibraryTurnedOff(const char* value, const std::string& library) {
  const std::string list = value == nullptr ? "" : value;
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    if (!item.empty() && (item == "all" || item == library)) return true;
    at = end + 1;
  }
  return false;
}

// Whether a shader library's expanded `source` uses simdgroup_matrix, which
// only GPUs of MTLGPUFamilyApple7 (Apple silicon) compile and run.
inline bool SourceNeedsApple7(const char* source) {
  return source != nullptr && std::strstr(source, "simdgroup_matrix<") != nullptr;
}

// A GPU's answers that decide which kernels go on its device: its language
// (MslVersionForDevice) and supportsFamily:MTLGPUFamilyApple7.
struct GpuFeatures {
  MslVersion language;
  bool apple7;
};

// Whether the kernels registered from `file` go on tensorflow-metal's GPU
// device, whose GPU answers `gpu`, with `turned_off` the value of
// kTfMetalOffVariable: "" when they do, else why not: the setting names their
// library, or their library among `sources` asks for a newer language
// (MslTooOldReason) or for simdgroup_matrix on a GPU without it. A kernel
// left off the GPU device has no GPU kernel, so TensorFlow places its op on
// the CPU, whose kernel computes it. Kernels without a library of their own
// (MPSGraph's) go on unless the setting names their folder.
inline std::string GpuRegistrationRefusal(const std::string& file, GpuFeatures gpu, const char* turned_off,
                                          const EmbeddedMetalSource* sources, size_t num_sources) {
  const std::string library = LibraryOfRegistration(file);
  if (LibraryTurnedOff(turned_off, library)) {
    return std::string(kTfMetalOffVariable) + "=" + turned_off + " leaves the kernels of '" + library +
           "' off the GPU device";
  }
  for (size_t i = 0; i < num_sources; ++i) {
    if (library != sources[i].library) continue;
    const MslVersion need = {sources[i].msl_major, sources[i].msl_minor};
    if (!MslAtLeast(gpu.language, need)) return MslTooOldReason(library, need);
    if (!gpu.apple7 && SourceNeedsApple7(sources[i].source)) {
      return "the Metal kernels of '" + library + "' need simdgroup_matrix, which this GPU does not offer (it is not "
             "of MTLGPUFamilyApple7: an Apple-silicon GPU is)";
    }
  }
  return "";
}

// The error of a kernel on tensorflow-metal's device that finds at its call
// that this GPU cannot run it (`reason`: a library the GPU claims to support
// that does not compile, a threadgroup over the pipeline's limits, a SIMD
// width the shaders do not assume, a buffer Metal refuses). No CPU recompute
// follows: the kernel is TensorFlow's GPU kernel, its tensors are
// tensorflow-metal's private-storage buffers, which the CPU cannot read, and
// its outputs must be such buffers; computing on the CPU would copy every
// input out and every output back through the stream with a wait inside its
// queue. The message names the setting that places the library's ops on the
// CPU from the next start on, and the per-op way.
inline std::string StreamRefusalMessage(const std::string& op, const std::string& library, const std::string& reason) {
  return "metal_ops: op '" + op + "' cannot run on this GPU: " + reason + ". Set " + kTfMetalOffVariable + "=" +
         library + " to leave the kernels of '" + library +
         "' off tensorflow-metal's GPU device (TensorFlow then runs them on the CPU), or place the op with "
         "tf.device('/CPU:0')";
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

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_METAL_RULES_H_
