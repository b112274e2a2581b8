// The Metal host glue's grid rules (kernels/metal/metal_rules.h) for the shim
// executor, in a file of their own: metal_rules.h's namespace mo::metal would
// hide MSL's ::metal from the shaders' headers in a file that includes both.
#include <cstdint>
#include <string>

#include "kernels/metal/metal_rules.h"

namespace msl_shim {
namespace exec {

uint64_t GridThreadgroups(uint64_t threads, uint64_t width) { return mo::metal::ThreadgroupCount(threads, width); }
uint64_t ThreadgroupBytes(uint64_t bytes) { return mo::metal::ThreadgroupMemoryLength(bytes); }
std::string ThreadgroupMisfit(uint64_t max_threads, uint64_t threads, uint64_t bytes, uint64_t device_bytes) {
  return mo::metal::ThreadgroupFitError(max_threads, threads, 0, bytes, device_bytes);
}

}  // namespace exec
}  // namespace msl_shim
