// A device's pipelines, compiled from the shader sources embedded in the
// library (embedded_sources.h): each library once and each pipeline once,
// kept for the process. Plain C++ around the two Metal calls the device
// adapter makes (kernels/metal/metal_device.mm: newLibraryWithSource and
// newComputePipelineStateWithDescriptor); the strict model of Metal
// (tests/metal_shim/metal_model.cc) keeps its pipelines in it too, so the
// language-version gate and the cache run in `make test`.
//
// The mutex guards the maps only, never a compile: each library and pipeline
// is built under its own once_flag, so a compile blocks only callers that
// need that same one. A failure stays in its entry (the compiler's log
// included) and is reported again at once.
#ifndef MO_KERNELS_METAL_PIPELINE_CACHE_H_
#define MO_KERNELS_METAL_PIPELINE_CACHE_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/metal/embedded_sources.h"
#include "kernels/metal/metal_rules.h"
#include "kernels/metal_plan/metal_api.h"

namespace mo {
namespace metal {

// The embedded source of `library`, or nullptr with *error set: no such
// source, or one asking for a language version above `available` (the
// device's, MslVersionForDevice).
inline const EmbeddedMetalSource* SourceToCompile(const std::string& library, MslVersion available,
                                                  std::string* error) {
  for (size_t i = 0; i < kNumEmbeddedMetalSources; ++i) {
    const EmbeddedMetalSource& source = kEmbeddedMetalSources[i];
    if (library != source.library) continue;
    const MslVersion need = {source.msl_major, source.msl_minor};
    if (MslAtLeast(available, need)) return &source;
    *error = MslTooOldMessage(library, need);
    return nullptr;
  }
  *error = "no embedded Metal source named '" + library + "'";
  return nullptr;
}

// `Library`: the adapter's compiled library (id<MTLLibrary>), false when none.
template <typename Library>
class PipelineCache {
 public:
  // `available`: the device's language version (MslVersionForDevice);
  // compile(source, &error) -> Library; build(library, function, &error) ->
  // std::unique_ptr<mtl::Pipeline> (nullptr on failure).
  template <typename Compile, typename Build>
  const mtl::Pipeline* Get(const std::string& library, const std::string& function, MslVersion available,
                           Compile compile, Build build, std::string* error) {
    LibraryEntry* lib = EntryOf(libraries_, library);
    std::call_once(lib->once, [&] {
      const EmbeddedMetalSource* source = SourceToCompile(library, available, &lib->error);
      if (source != nullptr) lib->library = compile(*source, &lib->error);
    });
    if (!lib->library) {
      *error = lib->error;
      return nullptr;
    }
    PipelineEntry* entry = EntryOf(pipelines_, std::make_pair(library, function));
    std::call_once(entry->once, [&] { entry->pipeline = build(lib->library, function, &entry->error); });
    if (entry->pipeline == nullptr) *error = entry->error;
    return entry->pipeline.get();
  }

 private:
  struct LibraryEntry {
    std::once_flag once;
    Library library{};
    std::string error;
  };
  struct PipelineEntry {
    std::once_flag once;
    std::unique_ptr<mtl::Pipeline> pipeline;
    std::string error;
  };
  // The entry of `key` in `map`, created empty on first use.
  template <typename Map, typename Key>
  typename Map::mapped_type::pointer EntryOf(Map& map, const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& entry = map[key];
    if (entry == nullptr) entry.reset(new typename Map::mapped_type::element_type);
    return entry.get();
  }
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<LibraryEntry>> libraries_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<PipelineEntry>> pipelines_;
};

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_PIPELINE_CACHE_H_
