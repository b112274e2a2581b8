// The shader sources compiled into the op library: one entry per
// kernels/metal/<library>.metal file, its kernels/common includes expanded by
// tools/build/embed_metal.py at build time (the generated $(BUILD)/gen/metal_sources.cc).
// The Metal glue compiles them with newLibraryWithSource: on first use, one
// kernel at a time (kernels/metal/pipeline_cache.h), so a Mac needs no Metal
// toolchain to build the library; the MSL shim tests compile the same
// expanded files as C++.
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

// A kernel template instantiation in an embedded source (`template
// [[host_name("name")]] [[kernel]] decltype(f<...>) f<...>;`): the pipeline
// cache compiles a source's body with only the instantiation a pipeline
// needs. A kernel that is no instantiation (`kernel void f(...)`) is part of
// the body. Listed in each source's text order, sources in table order.
struct EmbeddedMetalKernel {
  const char* library;    // the EmbeddedMetalSource's
  const char* host_name;  // the function's name in Metal
  size_t begin;           // the instantiation is source[begin, end) (bytes)
  size_t end;
};

extern const EmbeddedMetalKernel kEmbeddedMetalKernels[];
extern const size_t kNumEmbeddedMetalKernels;

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_EMBEDDED_SOURCES_H_
