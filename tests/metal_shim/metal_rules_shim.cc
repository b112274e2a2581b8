// The Metal glue's decisions (kernels/metal/metal_rules.h) for tests/test_metal_glue.py.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/metal/metal_rules.h"

extern "C" {

int shim_tensor_has_metal_buffer(int64_t num_elements) {
  return mo::metal::TensorHasMetalBuffer(num_elements) ? 1 : 0;
}

// The MSL version a macOS offers, as major * 100 + minor.
int shim_msl_version_for_macos(int os_major) {
  const mo::metal::MslVersion v = mo::metal::MslVersionForMacOS(os_major);
  return v.major * 100 + v.minor;
}

int shim_msl_at_least(int have_major, int have_minor, int need_major, int need_minor) {
  return mo::metal::MslAtLeast({have_major, have_minor}, {need_major, need_minor}) ? 1 : 0;
}

uint64_t shim_mtl_language_version_value(int major, int minor) {
  return mo::metal::MtlLanguageVersionValue({major, minor});
}

uint64_t shim_threadgroup_count(uint64_t num_threads, uint64_t width) {
  return mo::metal::ThreadgroupCount(num_threads, width);
}

// Writes the too-old message into `out` (NUL-terminated, truncated to `size`).
void shim_msl_too_old_message(const char* library, int need_major, int need_minor, int os_major, int os_minor,
                              char* out, int size) {
  const std::string m = mo::metal::MslTooOldMessage(library, {need_major, need_minor}, os_major, os_minor);
  std::strncpy(out, m.c_str(), static_cast<size_t>(size) - 1);
  out[size - 1] = '\0';
}

// ThreadgroupFitError into `out` (empty when the dispatch fits).
void shim_threadgroup_fit_error(uint64_t max_threads, uint64_t threads, uint64_t static_bytes, uint64_t bytes,
                                uint64_t device_bytes, char* out, int size) {
  const std::string m = mo::metal::ThreadgroupFitError(max_threads, threads, static_bytes, bytes, device_bytes);
  std::strncpy(out, m.c_str(), static_cast<size_t>(size) - 1);
  out[size - 1] = '\0';
}

uint64_t shim_fill_length(uint64_t bytes, uint64_t buffer_length) { return mo::metal::FillLength(bytes, buffer_length); }

int shim_gpu_sync_requested(const char* value) { return mo::metal::GpuSyncRequested(value) ? 1 : 0; }

// What the glue decides for the op it encodes now (the process environment).
int shim_gpu_sync_on() { return mo::metal::GpuSyncOn() ? 1 : 0; }

// GpuErrorMessage for kernels given as one string separated by ';'.
void shim_gpu_error_message(const char* op, const char* kernels, const char* status, const char* error, char* out,
                            int size) {
  std::vector<std::string> names;
  std::string rest = kernels;
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    names.push_back(rest.substr(0, end));
    rest = end == std::string::npos ? std::string() : rest.substr(end + 1);
  }
  const std::string m = mo::metal::GpuErrorMessage(op, names, status, error);
  std::strncpy(out, m.c_str(), static_cast<size_t>(size) - 1);
  out[size - 1] = '\0';
}

}  // extern "C"
