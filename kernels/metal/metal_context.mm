// Metal library loading and the pipeline-state cache (see metal_context.h).
#import "kernels/metal/metal_context.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <utility>

namespace mo {
namespace metal {
namespace {

std::mutex& CacheMutex() {
  static std::mutex mutex;
  return mutex;
}

// The .metallib installed beside this shared library.
NSString* MetallibPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&MetallibPath), &info) == 0 || info.dli_fname == nullptr) {
    return nil;
  }
  NSString* so_path = [NSString stringWithUTF8String:info.dli_fname];
  return [[so_path stringByDeletingLastPathComponent] stringByAppendingPathComponent:@"metal_ops.metallib"];
}

}  // namespace

id<MTLComputePipelineState> GetPipeline(id<MTLDevice> device, const std::string& function_name,
                                        TF_Status* status) {
  static std::map<std::pair<uint64_t, std::string>, id<MTLComputePipelineState>> pipelines;
  static std::map<uint64_t, id<MTLLibrary>> libraries;
  std::lock_guard<std::mutex> lock(CacheMutex());
  const uint64_t device_id = device.registryID;
  auto key = std::make_pair(device_id, function_name);
  auto found = pipelines.find(key);
  if (found != pipelines.end()) return found->second;

  id<MTLLibrary> library = libraries[device_id];
  if (library == nil) {
    NSString* path = MetallibPath();
    NSError* error = nil;
    library = path ? [device newLibraryWithURL:[NSURL fileURLWithPath:path] error:&error] : nil;
    if (library == nil) {
      const std::string msg = std::string("metal_ops: cannot load metal_ops.metallib beside the op library (") +
                              (error ? error.localizedDescription.UTF8String : "path not found") +
                              "); rebuild with `make`.";
      TF_SetStatus(status, TF_INTERNAL, msg.c_str());
      return nil;
    }
    libraries[device_id] = library;
  }
  id<MTLFunction> function = [library newFunctionWithName:@(function_name.c_str())];
  if (function == nil) {
    const std::string msg = "metal_ops: Metal function '" + function_name + "' is not in metal_ops.metallib";
    TF_SetStatus(status, TF_INTERNAL, msg.c_str());
    return nil;
  }
  NSError* error = nil;
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function error:&error];
  if (pipeline == nil) {
    const std::string msg = "metal_ops: cannot build pipeline for '" + function_name +
                            "': " + (error ? error.localizedDescription.UTF8String : "unknown error");
    TF_SetStatus(status, TF_INTERNAL, msg.c_str());
    return nil;
  }
  pipelines[key] = pipeline;
  return pipeline;
}

void Dispatch1D(id<MTLComputeCommandEncoder> encoder, id<MTLComputePipelineState> pipeline,
                uint64_t num_threads) {
  const NSUInteger width = pipeline.maxTotalThreadsPerThreadgroup < 256 ? pipeline.maxTotalThreadsPerThreadgroup : 256;
  // Capped: shaders loop grid-stride over the remainder, so any size works.
  const uint64_t kMaxGroups = 1ull << 20;
  uint64_t groups = (num_threads + width - 1) / width;
  if (groups > kMaxGroups) groups = kMaxGroups;
  if (groups == 0) groups = 1;
  [encoder setComputePipelineState:pipeline];
  [encoder dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(width, 1, 1)];
}

}  // namespace metal
}  // namespace mo
