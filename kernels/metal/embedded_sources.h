// The shader sources compiled into the op library: one entry per
// kernels/metal/<library>.metal file, its kernels/common includes expanded by
// tools/build/embed_metal.py at build time (the generated $(BUILD)/gen/metal_sources.cc).
// The Metal glue compiles them with newLibraryWithSource: on first use, so a
// Mac needs no Metal toolchain to build the library; the MSL shim tests
// compile the same expanded files as C++.
#ifndef MO_KERNELS_METAL_EMBEDDED_SOURCES_H_
#define MO_KERNELS_METAL_EMBEDDED_SOURCES_H_

#include <cstddef>

namespace mo {
namespace metal {

struct EmbeddedMetalSource {
  const char* library;  // "hash_encode" for kernels/hash_encode/hash_encode.metal
  const char* source;   // the expanded MSL text
  int msl_major;        // the language version its "// metal_ops: msl X.Y" line asks for
  int msl_minor;
};

extern const EmbeddedMetalSource kEmbeddedMetalSources[];
extern const size_t kNumEmbeddedMetalSources;

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_EMBEDDED_SOURCES_H_
