// A device's pipelines, compiled from the shader sources embedded in the
// library (embedded_sources.h): each pipeline once, kept for the process.
// A pipeline's first use compiles the library's body (its templates,
// helpers and plain kernels: a template costs nothing until instantiated)
// with only that function's instantiation (CompileText), so a first call
// pays Metal's front end for the kernels it uses, not for the library's
// every instantiation; the functions that are no instantiation share one
// compile of the body. Plain C++ around the two Metal calls the device
// adapter makes (kernels/metal/metal_device.mm: newLibraryWithSource and
// newComputePipelineStateWithDescriptor); the strict model of Metal
// (tests/metal_shim/metal_model.cc) keeps its pipelines in it too, so the
// language-version gate (per library), the splitting and the cache run in
// `make test`.
//
// The mutex guards the maps only, never a compile: each compile and pipeline
// is built under its own once_flag, so a compile blocks only callers that
// need that same one. A failure stays in its entry (the compiler's log
// included) and is reported again at once, for the functions it holds only.
#ifndef MO_KERNELS_METAL_PIPELINE_CACHE_H_
#define MO_KERNELS_METAL_PIPELINE_CACHE_H_

#include <algorithm>
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

// The instantiation of `function` in `library`'s source, nullptr when the
// function is none (a plain kernel, part of the body, or no function).
inline const EmbeddedMetalKernel* InstantiationOf(const std::string& library, const std::string& function) {
  for (size_t i = 0; i < kNumEmbeddedMetalKernels; ++i) {
    const EmbeddedMetalKernel& instantiation = kEmbeddedMetalKernels[i];
    if (library == instantiation.library && function == instantiation.host_name) return &instantiation;
  }
  return nullptr;
}

// One compile: a library's body with one of its instantiations, or none
// (nullptr: the body alone, for its plain kernels).
struct CompileUnit {
  const EmbeddedMetalSource& source;
  const EmbeddedMetalKernel* instantiation;
  std::string text;  // CompileText
};

// The text of that compile: `source` with each instantiation but `instantiation`
// cut out, its line breaks kept, so a compiler's line numbers are those of
// the expanded file (build/gen/<library>.metal).
inline std::string CompileText(const EmbeddedMetalSource& source, const EmbeddedMetalKernel* instantiation) {
  const std::string text = source.source;
  std::string out;
  size_t at = 0;
  for (size_t i = 0; i < kNumEmbeddedMetalKernels; ++i) {
    const EmbeddedMetalKernel& other = kEmbeddedMetalKernels[i];
    if (std::string(other.library) != source.library || &other == instantiation) continue;
    out.append(text, at, other.begin - at);
    out.append(static_cast<size_t>(std::count(text.begin() + other.begin, text.begin() + other.end, '\n')), '\n');
    at = other.end;
  }
  return out.append(text, at, std::string::npos);
}

// The start of a failed compile's message (the adapter adds the compiler's log).
inline std::string CompileFailure(const CompileUnit& unit) {
  return std::string("compiling the Metal shaders of '") + unit.source.library + "' failed" +
         (unit.instantiation == nullptr ? std::string()
                                        : std::string(" for kernel '") + unit.instantiation->host_name + "'");
}

// `Library`: the adapter's compiled library (id<MTLLibrary>), false when none.
template <typename Library>
class PipelineCache {
 public:
  // `available`: the device's language version (MslVersionForDevice);
  // compile(const CompileUnit&, &error) -> Library; build(library, function,
  // &error) -> std::unique_ptr<mtl::Pipeline> (nullptr on failure).
  template <typename Compile, typename Build>
  const mtl::Pipeline* Get(const std::string& library, const std::string& function, MslVersion available,
                           Compile compile, Build build, std::string* error) {
    PipelineEntry* entry = EntryOf(pipelines_, std::make_pair(library, function));
    std::call_once(entry->once, [&] {
      const EmbeddedMetalSource* source = SourceToCompile(library, available, &entry->error);
      if (source == nullptr) return;
      const EmbeddedMetalKernel* instantiation = InstantiationOf(library, function);
      CompileEntry* unit =
          EntryOf(compiles_, std::make_pair(library, instantiation == nullptr ? std::string() : function));
      std::call_once(unit->once, [&] {
        const CompileUnit what = {*source, instantiation, CompileText(*source, instantiation)};
        unit->library = compile(what, &unit->error);
      });
      if (!unit->library) {
        entry->error = unit->error;
        return;
      }
      entry->pipeline = build(unit->library, function, &entry->error);
    });
    if (entry->pipeline == nullptr) *error = entry->error;
    return entry->pipeline.get();
  }

 private:
  struct CompileEntry {
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
  // By (library, the instantiation's host name; "" for the body alone).
  std::map<std::pair<std::string, std::string>, std::unique_ptr<CompileEntry>> compiles_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<PipelineEntry>> pipelines_;
};

}  // namespace metal
}  // namespace mo

#endif  // MO_KERNELS_METAL_PIPELINE_CACHE_H_
